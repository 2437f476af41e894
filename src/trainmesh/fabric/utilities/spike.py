"""``lightning.fabric.utilities.spike``: Fabric's ``SpikeDetection``, defined as Lightning Fabric 2.6 defines it
(adapted from its module, Apache-2.0), and ``TrainingSpikeException``, trainmesh's (the Trainer side's).

A Fabric program calls ``detector.on_train_batch_end(fabric, loss, batch, batch_idx)`` itself (or through
``fabric.call``); a loss that is worse than the running mean of the last ``window`` losses by more than
``atol``/``rtol`` (or not finite) on any rank writes the batches to skip (this one and the one before) to
``exclude_batches_path`` (``skip_batches.json`` in the working directory when not given) and raises
``TrainingSpikeException``. The Trainer side's is ``trainmesh.callbacks.SpikeDetection``.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainmesh.utilities import spike_rules
from trainmesh.utilities.exceptions import TrainingSpikeException  # noqa: F401  # Lightning exports it here too

if TYPE_CHECKING:
    from trainmesh.fabric.fabric import Fabric

__all__ = ["SpikeDetection", "TrainingSpikeException"]


class SpikeDetection:
    """Stop a Fabric run at a loss spike, writing the batches to skip on resuming (Fabric's ``SpikeDetection``).

    Args:
        mode: "min" or "max": the direction in which the loss improves.
        window: how many losses the running mean (the reference) is over.
        warmup: the first batch index checked.
        atol, rtol: a spike differs from the running mean by at least ``atol`` and ``rtol * mean`` (None: no bound).
        exclude_batches_path: the file (or folder for ``skip_batches.json``) the skipped batches go to.
        finite_only: a non-finite loss is a spike; False: such a loss only stays out of the running mean.
    """

    def __init__(
        self,
        mode: Literal["min", "max"] = "min",
        window: int = 10,
        warmup: int = 1,
        atol: float | None = None,
        rtol: float | None = 2.0,
        exclude_batches_path: str | os.PathLike[str] | None = None,
        finite_only: bool = True,
    ) -> None:
        try:
            from torchmetrics.aggregation import MeanMetric
            from torchmetrics.wrappers import Running
        except ImportError as missing:
            raise RuntimeError(
                "SpikeDetection requires `torchmetrics>=1.0.0` Please upgrade your version."
            ) from missing
        self.last_val: torch.Tensor | float = 0.0
        # each process detects on its own losses (no synchronisation), as in Fabric
        self.running_mean = Running(MeanMetric(dist_sync_on_step=False, sync_on_compute=False), window=window)
        self.running_mean.dist_sync_on_step = False
        self.running_mean.sync_on_compute = False
        self.mode = mode
        self.warmup = warmup
        self.atol = atol
        self.rtol = rtol
        self.bad_batches: list[int] = []
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only

    @torch.no_grad()
    def on_train_batch_end(self, fabric: Fabric, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        """Check ``loss`` for a spike; a spike on any rank stops every rank."""
        if batch_idx == 0:
            self.running_mean.to(fabric.device)
        if self.exclude_batches_path is None:
            self.exclude_batches_path = os.getcwd()
        if not str(self.exclude_batches_path).endswith(".json"):
            self.exclude_batches_path = os.path.join(self.exclude_batches_path, "skip_batches.json")
        is_spike = bool(batch_idx >= self.warmup and self._is_spike(loss))
        fabric.barrier()
        if _reduce_decision(fabric, is_spike, every=False):
            spike_rules.record_spike(self.bad_batches, self.exclude_batches_path, batch_idx, fabric.global_rank == 0)
        elif self.finite_only or _reduce_decision(fabric, bool(torch.isfinite(loss).all()), every=True):
            self._update_stats(loss)

    def _is_spike(self, loss: torch.Tensor) -> bool:
        with warnings.catch_warnings():  # compute before the first update warns, as in Fabric
            warnings.simplefilter("ignore")
            running_val = self.running_mean.compute()
        curr_diff = loss - self.last_val
        if self.finite_only and not torch.isfinite(loss):
            return True
        if spike_rules.is_better(curr_diff, self.mode):
            return False
        return spike_rules.beyond_tolerances(loss, running_val, self.atol, self.rtol)

    def _update_stats(self, val: torch.Tensor) -> None:
        self.running_mean.update(val)
        self.last_val = val

    def state_dict(self) -> dict[str, Any]:
        return {
            "last_val": self.last_val.item() if isinstance(self.last_val, torch.Tensor) else self.last_val,
            "mode": self.mode,
            "warmup": self.warmup,
            "atol": self.atol,
            "rtol": self.rtol,
            "bad_batches": self.bad_batches,
            "bad_batches_path": self.exclude_batches_path,
            "running": self.running_mean.state_dict(),
            "mean": self.running_mean.base_metric.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_val = state_dict.pop("last_val")
        self.mode = state_dict.pop("mode")
        self.warmup = state_dict.pop("warmup")
        self.atol = state_dict.pop("atol")
        self.rtol = state_dict.pop("rtol")
        self.bad_batches = state_dict.pop("bad_batches")
        self.exclude_batches_path = state_dict.pop("bad_batches_path")
        # Fabric 2.6 reads ``self.running`` here, which it never sets (an AttributeError there); the
        # running wrapper's state is ``running_mean``'s
        self.running_mean.load_state_dict(state_dict.pop("running"))
        self.running_mean.base_metric.load_state_dict(state_dict.pop("mean"))


def _reduce_decision(fabric: Fabric, decision: bool, *, every: bool) -> bool:
    """Fabric's ``strategy.reduce_boolean_decision``: True on every rank (``every``) or on any."""
    if fabric.world_size == 1:
        return decision
    total = fabric.all_reduce(torch.tensor(int(decision), device=fabric.device), reduce_op="sum")
    return bool(total == fabric.world_size) if every else bool(total > 0)
