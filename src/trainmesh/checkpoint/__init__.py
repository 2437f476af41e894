"""Checkpoint files: atomic writes and reads. Distributed (sharded) checkpoints live here too."""

from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file

__all__ = ["atomic_save", "load_checkpoint_file"]
