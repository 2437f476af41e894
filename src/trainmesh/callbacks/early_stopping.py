"""Stop fit when a monitored metric stops improving, crosses a threshold, or stops being finite."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView

_MODES = ("min", "max")


class EarlyStopping(Callback):
    """Set ``trainer.should_stop`` once ``monitor`` has not improved for ``patience`` checks.

    A check runs at the end of every training epoch, after that epoch's validation (or, with
    ``check_on_train_epoch_end=False``, after every validation run). An improvement must beat the
    best value so far by more than ``min_delta`` in the direction of ``mode``. Training also
    stops at once when the value reaches ``stopping_threshold`` (good enough), passes
    ``divergence_threshold`` (hopeless), or is NaN/inf (with ``check_finite``).

    After a stop, ``stopped_epoch`` is the epoch of the check and ``stopping_reason`` one of
    ``"patience_exhausted"``, ``"stopping_threshold"``, ``"divergence_threshold"`` or
    ``"non_finite_metric"`` (``"not_stopped"`` before; ``"stopped_by_another_rank"`` where only
    another rank's value called for it); ``stopping_reason_message`` says why, in Lightning 2.6's
    words (None until a stop). The checkpoint state is Lightning's (``patience`` too, restored from it).

    Args:
        monitor: the logged metric to watch.
        min_delta: the smallest change that counts as an improvement (default ``0.0``).
        patience: checks without improvement before stopping (default ``3``).
        mode: ``"min"`` or ``"max"`` (default ``'min'``).
        strict: fail when ``monitor`` is not logged (default ``True``).
        check_finite: stop when the metric becomes NaN or infinite (default ``True``).
        stopping_threshold: stop once the metric reaches this value (default ``None``).
        divergence_threshold: stop once the metric is worse than this value (default ``None``).
        check_on_train_epoch_end: check at the end of each training epoch (False: after every validation run;
            None: as Lightning decides, at the epoch's end when validation runs once at the end of every epoch,
            else after every validation run) (default ``None``).
        verbose: say why it stopped (default ``False``).
        log_rank_zero_only: accepted for Lightning's programs: the message is said on global rank 0 only
            in any case (default ``False``).

    Examples:
        >>> early_stop = EarlyStopping(monitor="val_loss", patience=2, min_delta=0.01)
        >>> early_stop.evaluate(0.50), early_stop.evaluate(0.495), early_stop.evaluate(0.49)
        (False, False, True)
        >>> early_stop.stopping_reason
        'patience_exhausted'
    """

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        _check_arguments(monitor, min_delta, patience, mode)
        self.monitor = monitor
        self.min_delta = float(min_delta)
        self.patience = patience
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.verbose = verbose
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopping_reason = "not_stopped"
        self.stopping_reason_message: str | None = None  # why it stopped (Lightning's: set by a stop only)
        self._said: str | None = None  # what the latest check found, for verbose

    @property
    def state_key(self) -> str:
        # Several EarlyStopping callbacks (one per metric) keep separate state in a checkpoint.
        return f"{type(self).__qualname__}{ {'monitor': self.monitor, 'mode': self.mode}!r}"

    # ---- hooks --------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._checks_at_epoch_end(trainer):
            self._check(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if not self._checks_at_epoch_end(trainer) and getattr(trainer, "stage", "fit") == "fit":
            self._check(trainer)

    def _checks_at_epoch_end(self, trainer: TrainerView) -> bool:
        """``check_on_train_epoch_end``, or where it is None Lightning's rule: validation more than
        once an epoch, or not every epoch, means the check follows each validation run (at an
        epoch's end the metric may not exist yet)."""
        if self.check_on_train_epoch_end is not None:
            return self.check_on_train_epoch_end
        interval = getattr(trainer, "val_check_interval", 1.0)
        return interval in (None, 1.0) and getattr(trainer, "check_val_every_n_epoch", 1) == 1

    def _check(self, trainer: TrainerView) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            if self.strict:
                raise ValueError(
                    f"EarlyStopping(monitor={self.monitor!r}): that metric was not logged; logged metrics: "
                    f"{sorted(metrics)}. Log it with self.log({self.monitor!r}, value) in the Module, set "
                    "monitor to one of the names above, or pass strict=False to skip checks without it"
                )
            return
        local_stop = self.evaluate(metrics[self.monitor])
        # callback_metrics are reduced across ranks already, but a step-only metric is not: one
        # rank wanting to stop stops all, so no rank trains on alone and hangs in a collective.
        flag = torch.tensor(float(local_stop), device=trainer.runtime.device)
        should_stop = bool(trainer.runtime.all_reduce(flag, "max").item() > 0)
        if should_stop and not local_stop:
            self._stop("stopped_by_another_rank", f"another rank's check of {self.monitor} decided to stop")
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
            trainer.should_stop = True
        if self.verbose and trainer.is_global_zero and self._said:
            print(f"Epoch {trainer.current_epoch}: {self._said}", flush=True)

    # ---- the decision -------------------------------------------------------------------------
    def evaluate(self, value: Any) -> bool:
        """Take one new value of the monitored metric; return whether training should stop.

        Updates ``best_score``, ``wait_count`` and ``stopping_reason``. The Trainer's hooks call
        this; it is public so the rule can be checked without a Trainer.
        """
        current = float(value)
        better = _better_than(self.mode)
        # the messages are Lightning 2.6's words (a checkpoint keeps them), the value shown as its tensor
        shown = value.detach().squeeze() if isinstance(value, torch.Tensor) else torch.tensor(current)
        order = "<" if self.mode == "min" else ">"
        if self.check_finite and not math.isfinite(current):
            return self._stop(
                "non_finite_metric",
                f"Monitored metric {self.monitor} = {shown} is not finite."
                f" Previous best value was {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            return self._stop(
                "stopping_threshold",
                f"Stopping threshold reached: {self.monitor} = {shown} {order} {self.stopping_threshold}."
                " Signaling Trainer to stop.",
            )
        if self.divergence_threshold is not None and better(self.divergence_threshold, current):
            return self._stop(
                "divergence_threshold",
                f"Divergence threshold reached: {self.monitor} = {shown} {order} {self.divergence_threshold}."
                " Signaling Trainer to stop.",
            )
        if self._improves(current):
            previous, self.best_score, self.wait_count = self.best_score, current, 0
            self._said = _improvement_message(self.monitor, previous, current, self.min_delta)
            return False
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return self._stop(
                "patience_exhausted",
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records."
                f" Best score: {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        self._said = None
        return False

    def _improves(self, current: float) -> bool:
        if self.mode == "min":
            return current < self.best_score - self.min_delta
        return current > self.best_score + self.min_delta

    def _stop(self, reason: str, message: str) -> bool:
        self.stopping_reason, self.stopping_reason_message, self._said = reason, message, message
        return True

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Lightning 2.6's entries, in its types: ``best_score`` a tensor, ``stopping_reason`` the number
        of its ``EarlyStoppingReason`` (a stop another rank called for: its "not stopped", as there)."""
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": torch.tensor(self.best_score),
            "patience": self.patience,
            "stopping_reason": _REASON_CODES.get(self.stopping_reason, 0),
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As Lightning's: the saved ``patience`` replaces the constructor's; a reason saved as
        Lightning's number or as trainmesh's earlier name."""
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = float(state_dict["best_score"])
        self.patience = int(state_dict.get("patience", self.patience))
        reason = state_dict.get("stopping_reason", "not_stopped")
        self.stopping_reason = _REASON_NAMES.get(reason, "not_stopped") if isinstance(reason, int) else reason
        self.stopping_reason_message = state_dict.get("stopping_reason_message")


# Lightning's EarlyStoppingReason numbers, which its checkpoints hold
_REASON_CODES = {
    "not_stopped": 0,
    "stopping_threshold": 1,
    "divergence_threshold": 2,
    "patience_exhausted": 3,
    "non_finite_metric": 4,
}
_REASON_NAMES = {code: name for name, code in _REASON_CODES.items()}


def _better_than(mode: str) -> Callable[[float, float], bool]:
    return (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)


def _improvement_message(monitor: str, previous: float, current: float, min_delta: float) -> str:
    if math.isfinite(previous):
        return (
            f"Metric {monitor} improved by {abs(previous - current):.3f} >= min_delta = {abs(min_delta)}."
            f" New best score: {current:.3f}"
        )
    return f"Metric {monitor} improved. New best score: {current:.3f}"


def _check_arguments(monitor: str, min_delta: float, patience: int, mode: str) -> None:
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"EarlyStopping(monitor={monitor!r}): give the name of a logged metric, e.g. 'val_loss'")
    if mode not in _MODES:
        raise ValueError(
            f"EarlyStopping(mode={mode!r}): use 'min' (lower is better, e.g. a loss) or 'max' (e.g. accuracy)"
        )
    if min_delta < 0:
        raise ValueError(
            f"EarlyStopping(min_delta={min_delta}): min_delta is how much better than the best a value must be "
            "to count as an improvement, in the direction mode already gives; use a value >= 0"
        )
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        raise ValueError(f"EarlyStopping(patience={patience!r}) must be an integer >= 0 (checks without improvement)")
