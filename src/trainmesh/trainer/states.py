"""Lightning's ``trainer.state`` (``TrainerState``: status, fn, stage) and the flags read from it
(``trainer.training``, ``.validating``, ``.testing``, ``.predicting``, ``.sanity_checking``,
``.evaluating``), as Lightning 2.6 defines them (its ``trainer/states.py`` and ``Trainer``): the
values each hook sees are Lightning's (tests/trainer/test_states.py compares them with its run).

>>> state = TrainerState()
>>> begin_run(state, "fit"); state.fn == "fit", state.stage == RunningStage.TRAINING
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class _LightningEnum(str, Enum):
    """A str enum equal to its value in any case, as Lightning's ``LightningEnum``."""

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())


class TrainerStatus(_LightningEnum):
    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (self.FINISHED, self.INTERRUPTED)


class TrainerFn(_LightningEnum):
    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


def hook_stage(stage: str) -> str:
    """What the ``setup`` / ``teardown`` hooks get as ``stage``: Lightning passes ``trainer.state.fn``,
    a ``TrainerFn`` (equal to "fit", but ``f"{stage}"`` is ``TrainerFn.FITTING`` and it has ``.value``)."""
    try:
        return TrainerFn(stage)
    except ValueError:
        return stage


class RunningStage(_LightningEnum):
    """The running stage; while fitting: sanity check, training, or validation within it."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (self.VALIDATING, self.TESTING, self.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        if self in (self.VALIDATING, self.SANITY_CHECKING):
            return "val"
        return str(self.value)


@dataclass
class TrainerState:
    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped


# The stage each entry point starts in (Lightning's fit sets ``training``, validate ``validating``, ...).
_FIRST_STAGE = {
    TrainerFn.FITTING: RunningStage.TRAINING,
    TrainerFn.VALIDATING: RunningStage.VALIDATING,
    TrainerFn.TESTING: RunningStage.TESTING,
    TrainerFn.PREDICTING: RunningStage.PREDICTING,
}


def begin_run(state: TrainerState, fn: str) -> None:
    """``fit``/``validate``/``test``/``predict`` starting: before their first hook (``setup``)."""
    state.fn = TrainerFn(fn)
    state.status = TrainerStatus.RUNNING
    state.stage = _FIRST_STAGE[state.fn]


def end_run(state: TrainerState, *, succeeded: bool, keep_stage: bool = False) -> None:
    """After the teardown hooks (or on_exception): the stage is over (``keep_stage``: after Ctrl-C
    Lightning leaves it set)."""
    if succeeded:
        state.status = TrainerStatus.FINISHED
    if not keep_stage:
        state.stage = None


def interrupt_run(state: TrainerState) -> None:
    """A run failing: set before the on_exception hooks, which read it."""
    state.status = TrainerStatus.INTERRUPTED


def _flag(stage: RunningStage) -> property:
    """A Trainer property ``stage is <stage>``; setting True enters it, False leaves it (to no
    stage) only if it is the current one: Lightning's setters."""

    def get(self: Any) -> bool:
        # A stage is one of the enum's members, so identity answers without the enum's case-blind
        # __eq__ (five Python calls; ModelCheckpoint asks sanity_checking after every batch)
        now = self.state.stage
        return now is stage or (type(now) is not RunningStage and bool(now == stage))

    def set_(self: Any, value: bool) -> None:
        if value:
            self.state.stage = stage
        elif self.state.stage == stage:
            self.state.stage = None

    return property(get, set_, doc=f"Whether the running stage is {stage.name} (Lightning's flag).")


class RunningStageFlags:
    """The Trainer's ``state`` and its flags: a mixin, kept out of trainer.py. The Trainer holds
    the ``TrainerState`` in its loop state (``_state.trainer_state``)."""

    _state: Any

    @property
    def state(self) -> TrainerState:
        """Lightning's ``trainer.state``: status, fn (the entry point) and stage (the running stage)."""
        return self._state.trainer_state  # type: ignore[no-any-return]

    training = _flag(RunningStage.TRAINING)
    validating = _flag(RunningStage.VALIDATING)
    testing = _flag(RunningStage.TESTING)
    predicting = _flag(RunningStage.PREDICTING)
    sanity_checking = _flag(RunningStage.SANITY_CHECKING)

    @property
    def evaluating(self) -> bool:
        return self.state.stage is not None and self.state.stage.evaluating
