"""The Runtime's checkpoint service (``runtime.checkpoints``): the one door through which state is
saved and restored on a Runtime.

A user's loop calls ``runtime.save``/``runtime.load`` (one file, its own keys) and
``runtime.state_dicts``/``runtime.full_state_dict``, which are this service's; the Trainer's
checkpoints (``trainer/checkpointing.py``, ``trainer/resume.py``, the saves in the background
of ``checkpoint/saves.py``) go through :attr:`RuntimeCheckpoints.write`,
:attr:`RuntimeCheckpoints.read` and :attr:`RuntimeCheckpoints.saves`. The strategy decides how
each is written (one file, or a distributed checkpoint shard by shard): this service only hands
it the state and the writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import nn

from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.saves import CheckpointSaves
from trainmesh.checkpoint.writers import SYNCHRONOUS
from trainmesh.runtime_optimizer import RuntimeOptimizer, inner_optimizer
from trainmesh.strategies.lightning_face import restore_optimizer_states
from trainmesh.strategies.protocol import Strategy
from trainmesh.utilities.collections import detached_copies

# Runtime.save writes one file with the user's own keys; these name no entry in it, so a
# distributed checkpoint directory (written by the Trainer) is loaded with none of its
# shards in this run's layout: use the Trainer, or consolidate it first, for those.
_USER_KEYS = CheckpointKeys(model="model", optimizers="optimizers")


class _Host(Protocol):
    """The Runtime, as its checkpoint service reads it (named by what it uses: runtime.py imports
    this module). Read at each call: ``strategy="auto"`` may replace the strategy once the model
    is known, and modules are placed after the service is built."""

    strategy: Strategy
    _placed: nn.Module | None  # the latest module the Runtime placed: sharded optimizer state is keyed by it

    @property
    def is_global_zero(self) -> bool: ...


class RuntimeCheckpoints:
    """Save and restore a run's state through its strategy (``runtime``: the Runtime that owns it)."""

    def __init__(self, runtime: _Host, saves: CheckpointSaves) -> None:
        self._runtime = runtime
        self.saves = saves  # the Trainer's writes, at once or in the background (checkpoint/saves.py)

    # ---- state dicts ----------------------------------------------------------------------------
    def state_dicts(
        self, model: nn.Module | None, optimizers: Sequence[Any], *, sharded: bool = False
    ) -> dict[str, Any]:
        """``{"model": ..., "optim": [...]}``: full tensors, or each rank's shards (``sharded``)."""
        return self._runtime.strategy.state_dict(model, [inner_optimizer(o) for o in optimizers], sharded=sharded)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """The model's whole weights on rank 0 (CPU tensors, one process's names), None on the
        others, from any strategy. Every rank calls it: it gathers where the model is sharded."""
        state = self._runtime.strategy.state_dict(model, [], sharded=False)["model"]
        return detached_copies(state, model) if self._runtime.is_global_zero else None

    def load_state_dicts(
        self, model: nn.Module | None, optimizers: Sequence[Any], state: dict[str, Any], *, strict: bool = True
    ) -> None:
        """Load ``state``'s ``"model"`` and ``"optim"`` entries (full tensors or shards)."""
        self._runtime.strategy.load_state_dict(model, [inner_optimizer(o) for o in optimizers], state, strict=strict)

    # ---- the Trainer's checkpoints -----------------------------------------------------------------
    def load_optimizer_states(self, model: nn.Module | None, optimizers: Sequence[Any], checkpoint: Any) -> None:
        """A resumed fit's ``checkpoint["optimizer_states"]``, as Lightning restores them: a Lightning strategy
        subclass may skip them or load them itself (``lightning_restore_optimizer``, ``load_optimizer_state_dict``)."""
        saved = {"optim": checkpoint.get("optimizer_states", [])}
        restore_optimizer_states(
            self._runtime.strategy, checkpoint, lambda: self.load_state_dicts(model, optimizers, saved)
        )

    def write(self, checkpoint: dict[str, Any], path: str, *, sharded: CheckpointKeys) -> None:
        """Write ``checkpoint`` through :attr:`saves` (at once, or in the background), the entries
        ``sharded`` names shard by shard where the strategy shards."""
        self._runtime.strategy.save_checkpoint(checkpoint, path, sharded=sharded, writer=self.saves.writer)

    def read(
        self, path: str, model: nn.Module | None, optimizers: Sequence[Any], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        """A checkpoint file, or a distributed one loaded into state shaped like ``model``'s."""
        return self._runtime.strategy.load_checkpoint(path, model, [inner_optimizer(o) for o in optimizers], keys=keys)

    # ---- a user's loop: one file, the user's own keys ------------------------------------------------
    def save(self, path: str, state: dict[str, Any]) -> None:
        """Save ``state``: modules and optimizers in it are saved as state dicts, the rest as is."""
        self._runtime.strategy.save_checkpoint(self.to_checkpoint(state), path, sharded=None, writer=SYNCHRONOUS)

    def load(self, path: str, state: dict[str, Any] | None = None, *, strict: bool = True) -> dict[str, Any]:
        """Load ``path`` into the modules and optimizers of ``state`` in place; returns the entries
        of the checkpoint that were not loaded into an object."""
        checkpoint = self._runtime.strategy.load_checkpoint(path, self._runtime._placed, [], keys=_USER_KEYS)
        return self._restore(checkpoint, state or {}, strict=strict)

    def to_checkpoint(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` as it is saved: modules and optimizers (and objects with a ``state_dict``) as their state dicts."""
        converted: dict[str, Any] = {}
        for key, value in state.items():
            if isinstance(value, nn.Module):
                converted[key] = self.state_dicts(value, [])["model"]
            elif isinstance(value, (torch.optim.Optimizer, RuntimeOptimizer)):
                converted[key] = self.state_dicts(self._runtime._placed, [value])["optim"][0]
            elif hasattr(value, "state_dict") and callable(value.state_dict):
                converted[key] = value.state_dict()
            else:
                converted[key] = value
        return converted

    def _restore(self, checkpoint: dict[str, Any], state: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
        missing = [key for key in state if key not in checkpoint]
        if missing and strict:
            raise KeyError(f"the checkpoint has no entries {missing}; it holds {sorted(checkpoint)}")
        for key, target in state.items():
            if key not in checkpoint:
                continue
            value = checkpoint[key]
            if isinstance(target, nn.Module):
                self.load_state_dicts(target, [], {"model": value}, strict=strict)
            elif isinstance(target, (torch.optim.Optimizer, RuntimeOptimizer)):
                self.load_state_dicts(self._runtime._placed, [target], {"optim": [value]})
            elif hasattr(target, "load_state_dict") and callable(target.load_state_dict):
                target.load_state_dict(value)
            else:
                state[key] = value
        return {key: value for key, value in checkpoint.items() if key not in state}
