"""Checkpoint files: atomic writes and reads. Distributed (sharded) checkpoints live here too.

What the Trainer side (trainer/, callbacks/, module.py) may use is exported here; the modules
below are this package's own (tests/test_architecture.py: the one-door rule). Each name is
imported on first use (PEP 562, as ``trainmesh.strategies``): ``from trainmesh.checkpoint import
remove_checkpoint`` imports ``io.py``, not the distributed checkpoint's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and the import graph's checks
    from trainmesh.checkpoint.cleanup import finish_interrupted_swaps
    from trainmesh.checkpoint.compat import check_state_dict_fits
    from trainmesh.checkpoint.digest import DamagedCheckpoint
    from trainmesh.checkpoint.formats import UnreadableCheckpoint, content_problem
    from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file, remove_checkpoint
    from trainmesh.checkpoint.keys import CheckpointKeys
    from trainmesh.checkpoint.paths import (
        CheckpointPlaces,
        LastCheckpoints,
        checkpoint_entries,
        remove_interrupted_saves,
        resolve_checkpoint,
    )
    from trainmesh.checkpoint.weights_only import check_weights_only
    from trainmesh.checkpoint.writers import AsyncCheckpointIO

# name -> the module of this package that defines it
_LAZY = {
    "AsyncCheckpointIO": "writers",
    "CheckpointKeys": "keys",
    "CheckpointPlaces": "paths",
    "DamagedCheckpoint": "digest",
    "LastCheckpoints": "paths",
    "UnreadableCheckpoint": "formats",
    "atomic_save": "io",
    "check_state_dict_fits": "compat",
    "checkpoint_entries": "paths",
    "check_weights_only": "weights_only",
    "content_problem": "formats",
    "finish_interrupted_swaps": "cleanup",
    "load_checkpoint_file": "io",
    "remove_checkpoint": "io",
    "remove_interrupted_saves": "paths",
    "resolve_checkpoint": "paths",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


__all__ = [
    "AsyncCheckpointIO",
    "CheckpointKeys",
    "CheckpointPlaces",
    "DamagedCheckpoint",
    "LastCheckpoints",
    "UnreadableCheckpoint",
    "atomic_save",
    "check_state_dict_fits",
    "check_weights_only",
    "checkpoint_entries",
    "content_problem",
    "finish_interrupted_swaps",
    "load_checkpoint_file",
    "remove_checkpoint",
    "remove_interrupted_saves",
    "resolve_checkpoint",
]
