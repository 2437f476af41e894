"""The loops' progress counters, as Lightning keeps them (``_Progress`` / ``_BatchProgress``: a
``total`` across runs and a ``current`` for this epoch or evaluation run, each counting the
batches or epochs made ready, started, processed and completed), so that ``trainer.fit_loop``,
``trainer.validate_loop`` and ``trainer.test_loop`` (trainer/loop_views.py) read what Lightning's
loops show at each hook. The loops advance them at the points Lightning's do (fit_loop.py,
epoch_end.py, evaluation.py); the views hand out read-only copies.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Counts:
    """Lightning's ``_ProcessedTracker``: how many were made ready, started, processed, completed."""

    ready: int = 0
    started: int = 0
    processed: int = 0
    completed: int = 0

    @classmethod
    def at(cls, done: int) -> Counts:
        """All four at ``done`` (a position restored from a checkpoint)."""
        return cls(done, done, done, done)


@dataclass
class Progress:
    """One loop's counters: ``total`` and ``current``, advanced together."""

    total: Counts = field(default_factory=Counts)
    current: Counts = field(default_factory=Counts)
    is_last_batch: bool = False
    # The batch count of each loader of the latest evaluation run (Lightning's loop.max_batches).
    max_batches: list[int | float] = field(default_factory=list)

    def ready(self) -> None:
        self.total.ready += 1
        self.current.ready += 1

    def started(self) -> None:
        self.total.started += 1
        self.current.started += 1

    def processed(self) -> None:
        self.total.processed += 1
        self.current.processed += 1

    def completed(self) -> None:
        self.total.completed += 1
        self.current.completed += 1

    def count(self) -> None:
        """One more made ready, started and completed at once (Lightning's zero_grad tracker)."""
        for counts in (self.total, self.current):  # not through the three methods: a step's 3 Python calls fewer
            counts.ready += 1
            counts.started += 1
            counts.completed += 1

    def clear(self) -> None:
        """Lightning's ``_reset_progress`` (the fit's validation counters after the sanity check)."""
        self.total, self.current, self.is_last_batch = Counts(), Counts(), False

    def restart(self, total: int, current: int) -> None:
        """Both counters at a position (a fit's start: the restored epoch or batch counts)."""
        self.total, self.current = Counts.at(total), Counts.at(current)


@dataclass(frozen=True)
class EpochLoopStart:
    """A resumed fit's training batch counts as its epoch loop starts, and what its first ``advance`` does
    (trainer/restart_counts.py)."""

    train_batches: Progress
    batches_stepped: int  # the checkpoint's _batches_that_stepped (Lightning's, without the saved batch's step)
    # Lightning's restart stage of its epoch loop: "batch_end" (saved in on_train_batch_end), "last" (after
    # the batch's end: a validation, an epoch end), "inside" (inside a batch: on_exception), "" (no restart)
    stage: str
    window_ended: bool  # the saved batch ended an accumulation window (Lightning's not _should_accumulate)
    # Lightning's restart re-reads the epoch from its loader (a named resume, or Lightning's file): it warns as
    # it starts when the checkpoint ended inside an epoch and a loader keeps no state
    rereads_epoch: bool = False


@dataclass
class LoopCounters:
    """The counters of Lightning's loops: the fit's epochs and training batches, the fit's own
    validation loop (its sanity check and in-fit validation), ``trainer.validate``'s,
    ``trainer.test``'s and ``trainer.predict``'s."""

    epochs: Progress = field(default_factory=Progress)
    train_batches: Progress = field(default_factory=Progress)
    fit_validation: Progress = field(default_factory=Progress)
    validate: Progress = field(default_factory=Progress)
    test: Progress = field(default_factory=Progress)
    predict: Progress = field(default_factory=Progress)
    # the fit's scheduler steps (Lightning's scheduler_progress: ready and completed; current per epoch)
    schedulers: Progress = field(default_factory=Progress)
    # Lightning's optimizer progress of the fit: the epoch's optimizer steps (the total is global_step)
    # and the zero_grad calls of automatic optimization (one per accumulation window), current per epoch
    epoch_steps: int = 0
    # an automatic optimizer step begun (its batch's training_step under way) and not yet counted: Lightning's
    # step.ready is one ahead of completed until then (a checkpoint taken on an exception there holds that)
    step_pending: bool = False
    # a resumed fit's Lightning step.ready ahead of completed as restored (total: for the whole fit; current:
    # until its epoch loop starts, whose reset_on_restart evens it)
    steps_ready_ahead: int = 0
    current_steps_ready_ahead: int = 0
    zero_grads: Progress = field(default_factory=Progress)
    # steps a program counted by writing manual optimization's total.completed (manual_step_progress.py):
    # in Lightning's total (global_step), not in its current
    steps_written_to_total: int = 0
    fit_started: bool = False  # Lightning settles its fit loop's limits (min_epochs 0 for None) as a fit starts

    def evaluation(self, stage: str, fitting: bool) -> Progress | None:
        """The counters an evaluation ``stage`` (or predict) advances."""
        if stage == "sanity_check" or (stage == "validate" and fitting):
            return self.fit_validation
        return {"validate": self.validate, "test": self.test, "predict": self.predict}.get(stage)


def restore_counters(counters: LoopCounters, saved: LoopCounters) -> None:
    """``counters`` as ``saved`` (a copy taken earlier), in place: the loop views hold this object."""
    for name in (f.name for f in fields(LoopCounters)):
        setattr(counters, name, copy.deepcopy(getattr(saved, name)))


def _saved_fit_loop(checkpoint: Any) -> dict[str, Any]:
    loops = checkpoint.get("loops") if isinstance(checkpoint, dict) else None
    fit_loop = (loops or {}).get("fit_loop")
    return fit_loop if isinstance(fit_loop, dict) else {}


def restore_optimizer_progress(counters: LoopCounters, checkpoint: Any) -> None:
    """The epoch's optimizer steps and the zero_grad counts a resumed fit counts on from (the
    checkpoint's Lightning ``loops`` entry, as Lightning's restart reads them); none where it has none."""
    saved = _saved_fit_loop(checkpoint).get("epoch_loop.automatic_optimization.optim_progress", {})
    optimizer = saved.get("optimizer", {}) if isinstance(saved, dict) else {}
    step = optimizer.get("step", {})
    counters.epoch_steps = int(step.get("current", {}).get("completed", 0))
    ahead = [
        max(0, int(step.get(key, {}).get("ready", 0)) - int(step.get(key, {}).get("completed", 0)))
        for key in ("total", "current")
    ]
    counters.steps_ready_ahead, counters.current_steps_ready_ahead = ahead
    zero_grad = optimizer.get("zero_grad", {})
    total, current = (int(zero_grad.get(key, {}).get("completed", 0)) for key in ("total", "current"))
    counters.zero_grads = Progress(total=Counts.at(total), current=Counts.at(current))


def scheduler_progress_of(checkpoint: Any) -> Progress:
    """The scheduler steps a resumed fit counts on from: the checkpoint's Lightning ``loops`` entry
    (``scheduler_progress``, written by trainmesh or Lightning), as Lightning's restart reads them
    (``ready`` back at ``completed``); none counted where the checkpoint has no such entry."""
    saved = _saved_fit_loop(checkpoint).get("epoch_loop.scheduler_progress")
    if not isinstance(saved, dict):
        return Progress()
    total, current = (int(saved.get(key, {}).get("completed", 0)) for key in ("total", "current"))
    return Progress(total=Counts(ready=total, completed=total), current=Counts(ready=current, completed=current))


def saved_step_counts(global_step: int, counters: LoopCounters) -> dict[str, Any]:
    """The fit's optimizer steps as a checkpoint holds them: done (total, this epoch's), and how many
    more Lightning counts ready (a step begun and not completed, the offset a resumed fit keeps)."""
    pending = int(counters.step_pending)
    ahead = [counters.steps_ready_ahead + pending, counters.current_steps_ready_ahead + pending]
    return {"total": global_step, "current": counters.epoch_steps, "ahead": ahead}
