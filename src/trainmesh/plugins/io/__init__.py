"""Lightning's checkpoint-IO plugins. trainmesh writes checkpoints itself, atomically (a temporary
name, fsync, rename): ``TorchCheckpointIO`` is that writer under Lightning's name, and
``AsyncCheckpointIO`` writes through it in the background (``checkpoint/writers.py``). Another
``CheckpointIO`` (a program's own storage) is not taken by the Trainer."""

from __future__ import annotations

import os
from typing import Any

import torch

from trainmesh.checkpoint.io import atomic_save
from trainmesh.checkpoint.writers import AsyncCheckpointIO
from trainmesh.utilities.refusal import refused_class


class CheckpointIO:
    """Lightning's interface: save, load and remove one checkpoint file."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None:
        raise NotImplementedError

    def load_checkpoint(self, path: str, map_location: Any = None) -> dict[str, Any]:
        raise NotImplementedError

    def remove_checkpoint(self, path: str) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        """Nothing to release."""


class TorchCheckpointIO(CheckpointIO):
    """``torch.save`` / ``torch.load``: the format and the atomic write trainmesh's checkpoints use."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(
                "`Trainer.save_checkpoint(..., storage_options=...)` with `storage_options` arg"
                f" is not supported for `{type(self).__name__}`. Please implement your custom `CheckpointIO`"
                " to define how you'd like to use `storage_options`."
            )
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_save(checkpoint, path)

    def load_checkpoint(self, path: str, map_location: Any = None) -> dict[str, Any]:
        if not os.path.exists(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        loaded: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=False)
        return loaded

    def remove_checkpoint(self, path: str) -> None:
        if os.path.exists(path):
            os.remove(path)


XLACheckpointIO = refused_class(
    "XLACheckpointIO", "TPUs (torch_xla) are not supported by trainmesh; leave the plugin out", module=__name__
)
HPUCheckpointIO = refused_class(
    "HPUCheckpointIO", "Habana HPUs are not supported by trainmesh; leave the plugin out", module=__name__
)

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "HPUCheckpointIO", "TorchCheckpointIO", "XLACheckpointIO"]
