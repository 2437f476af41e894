"""``pytorch_lightning.core.lightning`` (removed in 1.9) against pytorch-lightning 1.9.5, recorded as data by
``tests/helpers/record_lightning_1_9_deprecations.py`` (``lightning1_leftovers.removed_module_paths``)."""

import json
from pathlib import Path

RECORDED = Path(__file__).resolve().parent.parent / "helpers" / "lightning_1_9_deprecations.json"


def test_core_lightning_module_path_imports_and_stops_at_construction_as_1_9_5():
    """``from pytorch_lightning.core.lightning import LightningModule`` (DeepUCSL's LitDeepCluster, l-progs6
    p04): 1.9.5 imports it and its ``__init__`` raises NotImplementedError naming today's import; trainmesh
    had no such module (a bare ModuleNotFoundError)."""
    from helpers.lightning1_leftovers import removed_module_paths

    theirs = json.loads(RECORDED.read_text())["leftovers"]["removed_module_paths"]
    assert theirs["core.lightning"][:2] == ["construct", "NotImplementedError"]
    assert removed_module_paths("trainmesh") == theirs
