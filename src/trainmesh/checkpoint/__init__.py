"""Checkpoint files: atomic writes and reads. Distributed (sharded) checkpoints live here too.

What the Trainer side (trainer/, callbacks/, module.py) may use is exported here; the modules
below are this package's own (tests/test_architecture.py: the one-door rule).
"""

from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.checkpoint.digest import DamagedCheckpoint
from trainmesh.checkpoint.formats import UnreadableCheckpoint, content_problem
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file, remove_checkpoint
from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.paths import CheckpointPlaces, LastCheckpoints, remove_interrupted_saves, resolve_checkpoint
from trainmesh.checkpoint.weights_only import check_weights_only
from trainmesh.checkpoint.writers import AsyncCheckpointIO

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
    "content_problem",
    "load_checkpoint_file",
    "remove_checkpoint",
    "remove_interrupted_saves",
    "resolve_checkpoint",
]
