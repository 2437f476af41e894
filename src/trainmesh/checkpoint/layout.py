"""The names a distributed checkpoint's directory is known by, apart from the code that reads and
writes one (``distributed.py``, which imports DCP's helpers): finding, listing and cleaning
checkpoints asks only these, so a run that never saves a sharded checkpoint does not import it."""

from __future__ import annotations

import os
from pathlib import Path

STATE_FILE = "trainer_state.pt"  # the name predates the generic format; kept so existing directories load
METADATA_FILE = ".metadata"


def is_distributed_checkpoint(path: str | os.PathLike[str]) -> bool:
    return Path(path).is_dir()
