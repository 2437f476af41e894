"""Stop fit when a monitored metric stops improving, crosses a threshold, or stops being finite."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.nested_metrics import refuse_nested_monitor
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_prefixed_message

_MODES = ("min", "max")
# Lightning's EarlyStopping logs its verbose lines here (as its lightning.pytorch.callbacks.early_stopping)
log = lightning_named_logger(__name__)


def _log_info(trainer: TrainerView, message: str, rank_zero_only: bool) -> None:
    """Lightning's ``EarlyStopping._log_info``: each rank's own words, with its rank where there are several."""
    rank = trainer.global_rank if trainer.world_size > 1 else None
    if rank is None or not rank_zero_only or rank == 0:
        log.info(rank_prefixed_message(message, rank))


class EarlyStoppingReason(Enum):
    """Why an :class:`EarlyStopping` stopped training: Lightning 2.6's enum, its members and numbers
    (a checkpoint holds the number).

    Examples:
        >>> EarlyStoppingReason(3)
        <EarlyStoppingReason.PATIENCE_EXHAUSTED: 3>
    """

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Set ``trainer.should_stop`` once ``monitor`` has not improved for ``patience`` checks.

    A check runs at the end of every training epoch, after that epoch's validation (or, with
    ``check_on_train_epoch_end=False``, after every validation run). An improvement must beat the
    best value so far by more than ``min_delta`` in the direction of ``mode``. Training also
    stops at once when the value reaches ``stopping_threshold`` (good enough), passes
    ``divergence_threshold`` (hopeless), or is NaN/inf (with ``check_finite``).

    After a stop, ``stopped_epoch`` is the epoch of the check and ``stopping_reason`` an
    :class:`EarlyStoppingReason` (``NOT_STOPPED`` before, and on a rank whose own value did not call
    for the stop another rank's did, as in Lightning); ``stopping_reason_message`` says why, in
    Lightning 2.6's words (None until a stop; on such a rank, what its own check found).
    ``best_score`` is a 0-d tensor and the checks compare tensors, in the metric's dtype, as
    Lightning's do. The checkpoint state is Lightning's (``patience`` too, restored from it).

    Args:
        monitor: the logged metric to watch.
        min_delta: the smallest change that counts as an improvement; negative, a worsening tolerated
            (Lightning's: kept negated for mode ``"min"``) (default ``0.0``).
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
        log_rank_zero_only: with ``verbose``, say it on global rank 0 only (False: every rank says its
            own check's words, prefixed ``[rank: N]`` where there are several, as Lightning's) (default ``False``).

    Examples:
        >>> early_stop = EarlyStopping(monitor="val_loss", patience=2, min_delta=0.01)
        >>> early_stop.evaluate(0.50), early_stop.evaluate(0.495), early_stop.evaluate(0.49)
        (False, False, True)
        >>> early_stop.stopping_reason
        <EarlyStoppingReason.PATIENCE_EXHAUSTED: 3>
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
        _check_arguments(monitor, patience, mode)
        self.monitor = monitor
        # Lightning's sign: negated for mode "min" (-0.0 for the default), so a value must beat the best
        # by it toward the better side; a negative min_delta (a tolerance) is taken as Lightning takes it
        self.min_delta = min_delta * (1 if mode == "max" else -1)
        self.patience = patience
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        # Lightning's: None is decided once, at the callback's setup (see setup)
        self._check_on_train_epoch_end = check_on_train_epoch_end
        self.verbose = verbose
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None  # why it stopped (Lightning's: set by a stop only)
        self._said: str | None = None  # what the latest check found, for verbose

    @property
    def state_key(self) -> str:
        # Several EarlyStopping callbacks (one per metric) keep separate state in a checkpoint.
        return f"{type(self).__qualname__}{ {'monitor': self.monitor, 'mode': self.mode}!r}"

    # ---- hooks --------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        """Lightning's rule where ``check_on_train_epoch_end`` is None, decided here once: validation more
        than once an epoch, or not every epoch, means the check follows each validation run (at an epoch's
        end the metric may not exist yet). A time-based ``val_check_interval`` leaves the trainer without
        ``val_check_interval``: the AttributeError stops the run here, before training, as in Lightning
        2.6.6 (pass ``check_on_train_epoch_end`` to decide yourself)."""
        if self._check_on_train_epoch_end is None:
            self._check_on_train_epoch_end = trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._checks_at_epoch_end(trainer) and not self._should_skip_check(trainer):
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if not self._checks_at_epoch_end(trainer) and not self._should_skip_check(trainer):
            self._run_early_stopping_check(trainer)

    # Lightning's names for the two steps, which subclasses override or call (Lightning's docs show
    # one that checks at on_train_end through _run_early_stopping_check)
    def _should_skip_check(self, trainer: TrainerView) -> bool:
        """No check outside fit, nor in its sanity check."""
        return getattr(trainer, "stage", "fit") != "fit" or bool(trainer.sanity_checking)

    def _checks_at_epoch_end(self, trainer: TrainerView) -> bool:
        """Whether the check runs at the training epoch's end (else after each validation run): as
        given, or as ``setup`` decided (not decided, as where a subclass's setup skips ours: after validation)."""
        return bool(self._check_on_train_epoch_end)

    def _run_early_stopping_check(self, trainer: TrainerView) -> None:
        """Check the monitored metric now and ask the Trainer to stop where the rule says so."""
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            if self.strict:
                # RuntimeError: the type Lightning raises here, so a program catching it still does
                raise RuntimeError(
                    f"EarlyStopping(monitor={self.monitor!r}): that metric was not logged; logged metrics: "
                    f"{sorted(metrics)}. Log it with self.log({self.monitor!r}, value) in the Module, set "
                    "monitor to one of the names above, or pass strict=False to skip checks without it"
                )
            return
        local_stop = self.evaluate(metrics[self.monitor])
        # A metric logged without sync_dist is each rank's own (Lightning's rule), so ranks may differ: one
        # rank wanting to stop stops all, so no rank trains on alone and hangs in a collective.
        flag = torch.tensor(float(local_stop), device=trainer.runtime.device)
        should_stop = bool(trainer.runtime.all_reduce(flag, "max").item() > 0)
        if should_stop:
            # Lightning's: a rank stopped by another keeps its reason and takes its own check's words
            self.stopping_reason_message = self._said
            self.stopped_epoch = trainer.current_epoch
            trainer.should_stop = True
        if self.verbose and self._said:
            _log_info(trainer, self._said, self.log_rank_zero_only)

    # ---- the decision -------------------------------------------------------------------------
    def evaluate(self, value: Any) -> bool:
        """Take one new value of the monitored metric; return whether training should stop.

        Updates ``best_score``, ``wait_count`` and ``stopping_reason``. The Trainer's hooks call
        this; it is public so the rule can be checked without a Trainer. A number is taken as the
        float32 tensor ``self.log`` makes of it; a tensor is compared in its own dtype, as Lightning does.
        """
        refuse_nested_monitor("EarlyStopping", self.monitor, value, AttributeError)  # 1.9.5's type
        current = value.detach().squeeze() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
        better = torch.lt if self.mode == "min" else torch.gt
        order = "<" if self.mode == "min" else ">"
        if self.check_finite and not torch.isfinite(current):
            return self._stop(
                EarlyStoppingReason.NON_FINITE_METRIC,
                f"Monitored metric {self.monitor} = {current} is not finite."
                f" Previous best value was {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            return self._stop(
                EarlyStoppingReason.STOPPING_THRESHOLD,
                f"Stopping threshold reached: {self.monitor} = {current} {order} {self.stopping_threshold}."
                " Signaling Trainer to stop.",
            )
        if self.divergence_threshold is not None and better(-current, -self.divergence_threshold):
            return self._stop(
                EarlyStoppingReason.DIVERGENCE_THRESHOLD,
                f"Divergence threshold reached: {self.monitor} = {current} {order} {self.divergence_threshold}."
                " Signaling Trainer to stop.",
            )
        # Lightning's arithmetic: the (signed) delta moves the value, in its dtype, toward the worse side
        if better(current - self.min_delta, self.best_score.to(current.device)):
            self._said = _improvement_message(self.monitor, self.best_score, current, self.min_delta)
            self.best_score, self.wait_count = current, 0
            return False
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return self._stop(
                EarlyStoppingReason.PATIENCE_EXHAUSTED,
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records."
                f" Best score: {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        self._said = None
        return False

    def _stop(self, reason: EarlyStoppingReason, message: str) -> bool:
        self.stopping_reason, self.stopping_reason_message, self._said = reason, message, message
        return True

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Lightning 2.6's entries, in its types: ``best_score`` a tensor, ``stopping_reason`` the number
        of its ``EarlyStoppingReason``."""
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As Lightning's: the saved ``patience`` replaces the constructor's; a reason saved as
        Lightning's number or as trainmesh's earlier name (a float ``best_score`` of earlier
        trainmesh checkpoints becomes a tensor)."""
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        best = state_dict["best_score"]
        self.best_score = best if isinstance(best, torch.Tensor) else torch.tensor(float(best))
        self.patience = int(state_dict.get("patience", self.patience))
        self.stopping_reason = _reason(state_dict.get("stopping_reason", 0))
        self.stopping_reason_message = state_dict.get("stopping_reason_message")


def _reason(saved: int | str) -> EarlyStoppingReason:
    """Lightning's number, or a name earlier trainmesh checkpoints held ("patience_exhausted", ...;
    "stopped_by_another_rank" was what Lightning calls not stopped)."""
    if isinstance(saved, int):
        return EarlyStoppingReason(saved)
    return EarlyStoppingReason.__members__.get(saved.upper(), EarlyStoppingReason.NOT_STOPPED)


def _improvement_message(monitor: str, previous: torch.Tensor, current: torch.Tensor, min_delta: float) -> str:
    if torch.isfinite(previous):
        return (
            f"Metric {monitor} improved by {abs(previous - current):.3f} >= min_delta = {abs(min_delta)}."
            f" New best score: {current:.3f}"
        )
    return f"Metric {monitor} improved. New best score: {current:.3f}"


def _check_arguments(monitor: str, patience: int, mode: str) -> None:
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"EarlyStopping(monitor={monitor!r}): give the name of a logged metric, e.g. 'val_loss'")
    if mode not in _MODES:  # Lightning's MisconfigurationException
        raise MisconfiguredValue(
            f"EarlyStopping(mode={mode!r}): use 'min' (lower is better, e.g. a loss) or 'max' (e.g. accuracy)"
        )
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        raise ValueError(f"EarlyStopping(patience={patience!r}) must be an integer >= 0 (checks without improvement)")
