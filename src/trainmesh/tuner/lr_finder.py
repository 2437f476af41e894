"""Lightning 2.6's learning-rate range test (its ``tuner/lr_finder.py``): from ``min_lr`` the
learning rate grows at each optimizer step (``"exponential"`` or ``"linear"``) to ``max_lr`` over
``num_training`` steps, the smoothed loss recorded at each; the search stops early where the loss
passes ``early_stop_threshold`` times the best. ``suggestion()`` is the rate of the steepest
descent of the loss. The model's weights and the Trainer's state are as before the search.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from trainmesh.callbacks.base import Callback
from trainmesh.callbacks.finders import lr_attribute as lr_attribute  # Lightning's rule, read by both
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.types import LRSchedulerConfig

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers


class _LRFinder:
    """The range test's results (``results["lr"]``, ``results["loss"]``) and its suggestion."""

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        assert mode in ("linear", "exponential"), "mode should be either `linear` or `exponential`"
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
        self.results: dict[str, Any] = {}
        self._optimal_idx: int | None = None

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the loss falls fastest (None with too few points)."""
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end])
        lrs = torch.tensor(self.results["lr"][skip_begin:-skip_end])
        is_finite = torch.isfinite(losses)
        losses, lrs = losses[is_finite], lrs[is_finite]
        if len(losses) < 2:
            log.error(
                "Failed to compute suggestion for learning rate because there are not enough points. Increase the loop"
                " iteration limits or the size of your dataset/dataloader."
            )
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        min_grad = int(torch.argmin(gradients).item())
        kept = torch.arange(len(self.results["loss"]))[skip_begin:-skip_end][is_finite]
        self._optimal_idx = int(kept[min_grad].item())
        return float(self.results["lr"][self._optimal_idx])

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The loss against the learning rate (matplotlib), the suggestion marked with ``suggest``."""
        import matplotlib.pyplot as plt

        lrs, losses = self.results["lr"], self.results["loss"]
        fig = ax.figure if ax is not None else None
        if ax is None:
            fig, ax = plt.subplots()
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None and self._optimal_idx:
            ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return fig


class _SearchRates(LRScheduler):
    """From each group's learning rate to ``end_lr`` over ``num_iter`` steps (Lightning's
    ``_LinearLR`` / ``_ExponentialLR``)."""

    def __init__(self, optimizer: torch.optim.Optimizer, end_lr: float, num_iter: int, mode: str) -> None:
        self.end_lr, self.num_iter, self.mode = end_lr, num_iter, mode
        self._lr: list[Any] = []
        super().__init__(optimizer, -1)

    def get_lr(self) -> list[Any]:
        r = (self.last_epoch + 1) / self.num_iter
        val: list[Any]
        if self.last_epoch <= 0:
            val = list(self.base_lrs)
        elif self.mode == "linear":
            val = [base + r * (self.end_lr - base) for base in self.base_lrs]
        else:
            val = [base * (self.end_lr / base) ** r for base in self.base_lrs]
        self._lr = val
        return val

    @property
    def lr(self) -> list[Any]:
        return self._lr


class _ExchangeScheduler(Callback):
    """At fit's start, the optimizer's rates set to ``min_lr`` and the search's scheduler, stepping
    every optimizer step, in place of the module's schedulers (Lightning's ``_exchange_scheduler``)."""

    def __init__(self, finder: _LRFinder) -> None:
        self.finder = finder

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if len(trainer.optimizers) != 1:  # Lightning's exception (and the ValueError it was)
            raise MisconfiguredValue(
                f"`model.configure_optimizers()` returned {len(trainer.optimizers)}, but"
                " learning rate finder only works with single optimizer"
            )
        optimizer = trainer.optimizers[0]  # the program's own, as Lightning's
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = self.finder.lr_min
        scheduler = _SearchRates(optimizer, self.finder.lr_max, self.finder.num_training, self.finder.mode)
        trainer.lr_scheduler_configs[:] = [LRSchedulerConfig(scheduler, interval="step")]


class _LRCallback(Callback):
    """Records the rate before each step and the smoothed loss after it; asks to stop where the
    loss diverges (Lightning's ``_LRCallback``)."""

    def __init__(self, num_training: int, early_stop_threshold: float | None = 4.0, beta: float = 0.98) -> None:
        self.num_training, self.early_stop_threshold, self.beta = num_training, early_stop_threshold, beta
        self.losses: list[float] = []
        self.lrs: list[float] = []
        self.avg_loss, self.best_loss = 0.0, 0.0

    def on_train_batch_start(self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches == 0:
            self.lrs.append(trainer.lr_scheduler_configs[0].scheduler.lr[0])

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches != 0:
            return
        if not outputs:
            self.losses.append(float("nan"))
            return
        current_loss = (outputs if isinstance(outputs, torch.Tensor) else outputs["loss"]).item()
        step = trainer.global_step
        self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * current_loss
        smoothed = self.avg_loss / (1 - self.beta ** (step + 1))
        threshold = self.early_stop_threshold
        if threshold is not None and step > 1 and smoothed > threshold * self.best_loss:
            trainer.should_stop = True
        trainer.should_stop = bool(trainer.runtime.broadcast(trainer.should_stop))
        if smoothed < self.best_loss or step == 1:
            self.best_loss = smoothed
        self.losses.append(smoothed)


def set_lr(model: Any, name: str, lr: float) -> None:
    """The model's learning rate attribute (or hparams entry) set to ``lr``."""
    if hasattr(model, name):
        setattr(model, name, lr)
    if name in getattr(model, "hparams", {}):
        model.hparams[name] = lr
