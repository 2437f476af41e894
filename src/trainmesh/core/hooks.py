"""Lightning's ``lightning.pytorch.core.hooks`` path: the hook classes a Module is made of
(``ModelHooks``, ``DataHooks``; ``CheckpointHooks``: the two checkpoint hooks, which trainmesh's
``ModelHooks`` also carries), for a program that imports or subclasses them from here."""

from __future__ import annotations

from typing import Any

from trainmesh.data_hooks import DataHooks
from trainmesh.module_hooks import ModelHooks

__all__ = ["CheckpointHooks", "DataHooks", "ModelHooks"]


class CheckpointHooks:
    """``on_save_checkpoint`` / ``on_load_checkpoint``, doing nothing until overridden (the Module has
    them through ``ModelHooks``)."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add to ``checkpoint`` what the module needs back (called before it is written)."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read back what ``on_save_checkpoint`` added (called before the weights are loaded)."""
