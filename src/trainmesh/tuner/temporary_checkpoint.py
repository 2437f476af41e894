"""Lightning 2.6's lines about the temporary checkpoint of its Tuner's searches.

Lightning saves the Trainer's state to ``<default_root_dir>/.lr_find_<uuid>.ckpt`` (or
``.scale_batch_size_<uuid>.ckpt``) before a search and restores it after, then deletes the file;
it says so (``weights_only`` defaulted as the file is written, ``Restoring states ...`` and
``Restored all states ...`` as it is read). trainmesh keeps the state in memory instead (the same
weights and fit state after the search) and says Lightning's lines, at the same moments, with a
path of Lightning's form: a program reading its output sees what Lightning's shows. ``says`` picks
the release whose lines: "2.6", "1.9.5" (a 1.x program's ``trainer.tune``), or "" (none).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from trainmesh.utilities.rank_zero import rank_zero_info


def saved(default_root_dir: Any, search: str, *, says: str = "2.6") -> str:
    """The path Lightning's search would save to (``search``: "lr_find", "scale_batch_size"), said saved."""
    path = os.path.join(str(default_root_dir), f".{search}_{uuid.uuid4()}.ckpt")
    if says == "2.6":
        rank_zero_info("`weights_only` was not set, defaulting to `False`.")  # Lightning's dump_checkpoint
    return path


def restored(path: str, *, says: str = "2.6") -> None:
    """Lightning's lines as its checkpoint connector restores the search's checkpoint."""
    if says:
        rank_zero_info(f"Restoring states from the checkpoint path at {path}")
        where = "checkpoint file" if says == "1.9.5" else "checkpoint"  # 1.9.5's words
        rank_zero_info(f"Restored all states from the {where} at {path}")
