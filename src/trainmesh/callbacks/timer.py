"""``Timer`` and ``Trainer(max_time=...)``, as Lightning 2.6 defines them (its ``callbacks/timer.py``):
the time spent in training, validation and testing, and a stop once training has run for the
duration, checked at each training batch's end (``interval="step"``, what ``max_time`` uses) or
each epoch's (``"epoch"``), and at fit's start (a resumed run whose time is spent stops at once).
Every rank stops together: rank 0's decision is broadcast.

>>> timer = Timer(duration="00:12:00:00")  # DD:HH:MM:SS; or a timedelta, or a dict of its fields
>>> timer.time_remaining()
43200.0
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.enums import LightningEnum
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.rank_zero import rank_zero_info

_INTERVALS = ("step", "epoch")
# Lightning's RunningStage values, the keys of the times kept (and of the checkpointed state)
_STAGES = ("train", "sanity_check", "validate", "test", "predict")


def _seconds(duration: str | timedelta | dict[str, int] | None) -> float | None:
    if isinstance(duration, str):
        match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", duration.strip())
        if not match:
            raise MisconfiguredValue(
                f"`Timer(duration={duration!r})` is not a valid duration. Expected a string in the format DD:HH:MM:SS."
            )
        days, hours, minutes, seconds = (int(g) for g in match.groups())
        duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(duration, dict):
        duration = timedelta(**duration)
    return duration.total_seconds() if duration is not None else None


class Interval(LightningEnum):
    """Where ``Timer`` checks the time: at each training batch's end, or each epoch's."""

    step = "step"
    epoch = "epoch"


class Timer(Callback):
    """Tracks the time spent in the training, validation and test loops, and stops training when
    ``duration`` is reached (a ``"DD:HH:MM:SS"`` string, a ``timedelta`` or a dict of its fields).
    ``timer.time_elapsed("train")``, ``start_time("validate")``, ``end_time("test")``: in seconds.

    Args:
        duration: the time limit: ``"DD:HH:MM:SS"``, a ``timedelta`` or a dict (default ``None``).
        interval: check at each ``"step"`` or ``"epoch"`` (default ``'step'``).
        verbose: say when it stops (default ``True``).

    Examples:
        >>> timer = Timer(duration="00:01:00:00", interval="step")  # stop after one hour of training steps
    """

    def __init__(
        self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step", verbose: bool = True
    ) -> None:
        super().__init__()
        if interval not in _INTERVALS:
            raise MisconfiguredValue(
                f"Unsupported parameter value `Timer(interval={interval})`. Possible choices are: {', '.join(_INTERVALS)}"
            )
        self._duration = _seconds(duration)
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset: float = 0  # an int, as Lightning's: time_elapsed() before training is 0

    def start_time(self, stage: str = "train") -> float | None:
        return self._start_time[_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        return self._end_time[_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        start, end = self.start_time(stage), self.end_time(stage)
        offset = self._offset if _stage(stage) == "train" else 0  # training's time before a resume
        if start is None:
            return offset
        if end is None:
            return time.monotonic() - start + offset
        return end - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_time["train"] = time.monotonic()

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_time["train"] = time.monotonic()

    def on_validation_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_time["validate"] = time.monotonic()

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_time["validate"] = time.monotonic()

    def on_test_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_time["test"] = time.monotonic()

    def on_test_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_time["test"] = time.monotonic()

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._duration is not None:  # a restored timer may already be spent
            self._check_time_remaining(trainer)

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = state_dict.get("time_elapsed", {}).get("train", 0)

    def _check_time_remaining(self, trainer: TrainerView) -> None:
        assert self._duration is not None
        should_stop = trainer.runtime.broadcast(self.time_elapsed() >= self._duration)  # rank 0's clock decides
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed("train")))
            rank_zero_info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")


# Lightning's RunningStage values (trainer/states.py), read here without importing the Trainer side
_RUNNING_STAGES = ("train", "sanity_check", "validate", "test", "predict")


def _stage(stage: str) -> str:
    """A RunningStage or its value (Lightning's ``RunningStage(stage)``: its ValueError for another)."""
    value = getattr(stage, "value", stage)
    if value not in _RUNNING_STAGES:
        raise ValueError(f"{stage!r} is not a valid RunningStage")
    return str(value)


def with_max_time(
    callbacks: Any, max_time: str | timedelta | dict[str, int] | None, max_epochs: int | None, max_steps: int
) -> tuple[list[Any], int | None]:
    """``Trainer(max_time=...)``: a ``Timer(max_time, interval="step")`` after the other callbacks
    (none where one is given), and, with neither max_epochs nor max_steps, no epoch limit (Lightning's)."""
    if max_time is None and max_epochs is not None:
        return callbacks, max_epochs  # nothing to do: the callbacks as given
    callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    has_timer = any(isinstance(cb, Timer) for cb in callbacks)
    if max_time is not None:
        if has_timer:
            rank_zero_info("Ignoring `Trainer(max_time=...)`, callbacks list already contains a Timer.")
        else:
            callbacks = [*callbacks, Timer(duration=max_time, interval="step")]
            has_timer = True
    if max_epochs is None and max_steps == -1 and has_timer:
        max_epochs = -1
    return callbacks, max_epochs
