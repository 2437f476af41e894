"""``lightning1_owner_items``' programs run under trainmesh, and what 1.9.5 measured running them
(``lightning_1_9_owner_items.json``, ``record_lightning_1_9_owner_items.py``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from helpers import lightning1_owner_items as items

RECORDED = json.loads((Path(__file__).resolve().parent / "lightning_1_9_owner_items.json").read_text())["measured"]


def under_trainmesh(name: str, **kwargs: Any) -> Any:
    """``items.<name>(trainmesh)``, quietly (the JSON holds what 1.9.5 gave under ``name``)."""
    import numpy

    import trainmesh

    if "Inf" not in dir(numpy):  # (what measure() sets for 1.9.5's ModelCheckpoint; harmless here)
        numpy.Inf = numpy.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(items, name)(trainmesh, **kwargs)
