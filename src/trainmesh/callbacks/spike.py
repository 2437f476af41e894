"""``SpikeDetection``, as Lightning 2.6 defines it (its ``callbacks/spike.py`` on Fabric's
``utilities/spike.py``): after each training batch (from batch ``warmup``), a loss that is not an
improvement on the last one (``mode``) and is farther than ``atol`` and ``rtol`` times the running
mean of the last ``window`` losses from that mean (or, with ``finite_only``, not finite) is a spike:
the batch and the one before are written to ``exclude_batches_path`` (a JSON list; by default
``default_root_dir/skip_batches.json``) and training stops with ``TrainingSpikeException``. Every
process stops where any one saw a spike.

>>> detector = SpikeDetection(window=5, warmup=2, rtol=2.0)

The running mean is a window of the last losses (Lightning keeps a torchmetrics ``Running(MeanMetric)``;
the checkpointed state holds the window as a list here instead).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities import spike_rules
from trainmesh.utilities.exceptions import TrainingSpikeException  # noqa: F401  # Lightning exports it here too


class SpikeDetection(Callback):
    """Stop training at a spike in the training loss (see the module's docstring).

    Args:
        mode: ``"min"`` (a loss no higher than the last one is no spike) or ``"max"`` (one no lower is none) (default ``'min'``).
        window: how many of the last losses the running mean, the reference for spikes, is taken over (default ``10``).
        warmup: the batch index (in the epoch) from which spikes are looked for (default ``1``).
        atol: a spike is at least this far from the running mean (None: no absolute test; with ``rtol``, both must hold) (default ``None``).
        rtol: a spike is at least ``rtol`` times the running mean away from it (None: no relative test) (default ``2.0``).
        exclude_batches_path: the JSON file (or a folder for ``skip_batches.json``) that gets the spiking batch's index and the one before (None: ``default_root_dir/skip_batches.json``) (default ``None``).
        finite_only: a loss that is not finite (NaN, inf) is a spike; False: it is judged by ``atol``/``rtol`` as any other, and kept out of the running mean (default ``True``).

    Examples:
        >>> detector = SpikeDetection(window=20, warmup=10, rtol=2.0, exclude_batches_path="spikes.json")
        >>> # Trainer(callbacks=[detector]): a spike raises TrainingSpikeException
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
        self.last_val: torch.Tensor | float = 0.0
        self.window: deque[torch.Tensor] = deque(maxlen=window)
        self.mode, self.warmup, self.atol, self.rtol = mode, warmup, atol, rtol
        self.bad_batches: list[int] = []
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only

    @torch.no_grad()
    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if isinstance(outputs, torch.Tensor):
            loss = outputs.detach()
        elif isinstance(outputs, Mapping):
            loss = outputs["loss"].detach()
        else:
            raise TypeError(f"outputs have to be of type torch.Tensor or Mapping, got {type(outputs).__qualname__}")
        if self.exclude_batches_path is None:
            self.exclude_batches_path = os.path.join(trainer.default_root_dir, "skip_batches.json")
        if not str(self.exclude_batches_path).endswith(".json"):
            self.exclude_batches_path = os.path.join(self.exclude_batches_path, "skip_batches.json")
        is_spike = bool(batch_idx >= self.warmup and self._is_spike(loss))
        # Each process decides on its own loss; all stop if any one saw a spike
        if _any_rank(trainer, is_spike):
            spike_rules.record_spike(self.bad_batches, self.exclude_batches_path, batch_idx, trainer.global_rank == 0)
        elif self.finite_only or not _any_rank(trainer, not bool(torch.isfinite(loss).all())):
            self.window.append(loss.float())
            self.last_val = loss

    def _is_spike(self, loss: torch.Tensor) -> bool:
        running = torch.stack(list(self.window)).sum() / len(self.window) if self.window else torch.tensor(float("nan"))
        if self.finite_only and not torch.isfinite(loss):
            return True
        if spike_rules.is_better(loss - self.last_val, self.mode):
            return False
        return spike_rules.beyond_tolerances(loss, running, self.atol, self.rtol)

    def state_dict(self) -> dict[str, Any]:
        return {
            "last_val": self.last_val.item() if isinstance(self.last_val, torch.Tensor) else self.last_val,
            "mode": self.mode,
            "warmup": self.warmup,
            "atol": self.atol,
            "rtol": self.rtol,
            "bad_batches": self.bad_batches,
            "bad_batches_path": self.exclude_batches_path,
            "window": [float(value) for value in self.window],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_val, self.mode, self.warmup = state_dict["last_val"], state_dict["mode"], state_dict["warmup"]
        self.atol, self.rtol, self.bad_batches = state_dict["atol"], state_dict["rtol"], state_dict["bad_batches"]
        self.exclude_batches_path = state_dict["bad_batches_path"]
        self.window.clear()
        self.window.extend(torch.tensor(value) for value in state_dict.get("window", []))


def _any_rank(trainer: TrainerView, decision: bool) -> bool:
    if trainer.world_size == 1:
        return decision
    return bool(trainer.runtime.all_reduce(torch.tensor(float(decision), device=trainer.runtime.device), "max") > 0)


def __getattr__(name: str) -> Any:
    # Lightning's module imports Fabric's detector as ``FabricSpikeDetection``: the same class as
    # ``lightning.fabric.utilities.spike.SpikeDetection`` here, imported on first use (it needs torchmetrics)
    if name == "FabricSpikeDetection":
        from trainmesh.fabric.utilities.spike import SpikeDetection

        return SpikeDetection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
