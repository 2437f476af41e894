"""``trainer.fit_loop``, ``trainer.validate_loop`` and ``trainer.test_loop`` as programs read them:
read-only views of Lightning 2.6's loop objects onto trainmesh's loop state (``max_epochs``,
``epoch_progress``, ``epoch_loop.batch_progress``, ``epoch_loop._batches_that_stepped``,
``epoch_loop.val_loop.batch_progress``, ``max_batches``, ...). The counters are copies taken at the
read (loop_progress.py); a write a program makes to a loop's setting goes to the Trainer's own
(``trainer.fit_loop.max_epochs = 5`` between fits, as in Lightning), any other write is refused
with what to do instead, since trainmesh's loops are no objects a program can rewire. During a fit
a callback may write three of Lightning's, which the loop reads live: ``fit_loop.max_epochs`` (the
fit's length), ``fit_loop.max_batches`` (what ``trainer.num_training_batches`` reads) and
``fit_loop._skip_backward`` (the loop's forward-only switch): StochasticWeightAveraging's door.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, NoReturn, Protocol, cast

from trainmesh.loops.loop import TRAINER_LOOPS_REFUSAL
from trainmesh.trainer.loop_progress import Counts, LoopCounters, Progress
from trainmesh.trainer.loop_state import LoopPosition
from trainmesh.trainer.manual_step_progress import ManualOptimizationView, ManualStepOwner
from trainmesh.trainer.states import TrainerState, TrainerStatus
from trainmesh.trainer_view import LoopProgress
from trainmesh.utilities.refusal import RefusedError


class LoopOwner(Protocol):
    """What the views read of the Trainer (its settings are written through it); the Trainer is one."""

    max_epochs: int
    min_epochs: int | None
    max_steps: int
    min_steps: int | None

    @property
    def global_step(self) -> int: ...
    @property
    def num_training_batches(self) -> int | float: ...
    @property
    def loop(self) -> LoopProgress: ...
    @property
    def state(self) -> TrainerState: ...
    @property
    def is_last_batch(self) -> bool: ...
    def _connect_optimizer_loop(self, loop: Any) -> None: ...
    def _load_train_loader(self) -> None: ...


def _refuse(where: str, name: str) -> NoReturn:
    raise AttributeError(
        f"`{where}.{name}` is read-only in trainmesh: its loops are views of the Trainer's loop state, "
        "not objects a program replaces or rewires. Read it; change the run through the Trainer's "
        "arguments (Trainer(max_epochs=..., max_steps=...)) or `trainer.fit_loop.max_epochs` / "
        "`min_epochs` and `trainer.fit_loop.epoch_loop.max_steps` / `min_steps` between runs."
    )


class _ReadOnlyCopy:
    """A copy of a loop's counters at the moment it was read; a write is refused, not lost."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__slots__ and getattr(self, name) == value:
            return  # what it holds already: a program "resetting" a fresh run's counters changes nothing
        _refuse("loop progress", name)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class Tracker(_ReadOnlyCopy):
    """Lightning's ``_ProcessedTracker``: ``ready``, ``started``, ``processed``, ``completed``."""

    __slots__ = ("ready", "started", "processed", "completed")
    ready: int
    started: int
    processed: int
    completed: int


class EpochProgressCopy(_ReadOnlyCopy):
    """Lightning's ``_Progress`` of the fit's epochs: ``total``, ``current``."""

    __slots__ = ("total", "current")
    total: Tracker
    current: Tracker


def _tracker(counts: Counts) -> Tracker:
    return Tracker(counts.ready, counts.started, counts.processed, counts.completed)


class ProgressCopy(_ReadOnlyCopy):
    """Lightning's ``_Progress`` / ``_BatchProgress``: ``total``, ``current``, ``is_last_batch``."""

    __slots__ = ("total", "current", "is_last_batch")
    total: Tracker
    current: Tracker
    is_last_batch: bool

    @classmethod
    def of(cls, progress: Progress, *, is_last_batch: bool | None = None) -> ProgressCopy:
        last = progress.is_last_batch if is_last_batch is None else is_last_batch
        return cls(_tracker(progress.total), _tracker(progress.current), last)


class OptimizerProgressCopy(_ReadOnlyCopy):
    """Lightning's ``_OptimizerProgress``: ``step`` and ``zero_grad`` (``_Progress`` each)."""

    __slots__ = ("step", "zero_grad")
    step: ProgressCopy
    zero_grad: ProgressCopy


class OptimizationProgressCopy(_ReadOnlyCopy):
    """Lightning's ``_OptimizationProgress``: ``optimizer`` and its ``optimizer_steps``."""

    __slots__ = ("optimizer",)
    optimizer: OptimizerProgressCopy

    @property
    def optimizer_steps(self) -> int:
        return self.optimizer.step.total.completed


class _View:
    """A loop view: attribute writes go only through a property that has a setter."""

    __slots__ = ("_owner", "_counters")
    _owner: LoopOwner
    _counters: LoopCounters
    _where = "trainer loop"

    def __init__(self, owner: LoopOwner, counters: LoopCounters) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_counters", counters)

    # What a callback may change while the loop runs (the loop reads it live), as in Lightning
    _running_writes: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        member = getattr(type(self), name, None)
        if not (isinstance(member, property) and member.fset is not None):
            _refuse(self._where, name)
        if self._owner.state.status == TrainerStatus.RUNNING and name not in self._running_writes:
            raise AttributeError(
                f"`{self._where}.{name}` cannot change while the Trainer runs in trainmesh: the loop reads "
                "its settings when the run starts. Set it before calling trainer.fit (Lightning would "
                "apply it mid-run)."
            )
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"<trainmesh view of Lightning's {self._where}>"

    # pytorch-lightning 1.x's loop objects were rewired through these: refused with what to do instead
    def connect(self, **loops: Any) -> NoReturn:
        raise RefusedError(f"{self._where}.connect({', '.join(loops)}=...): {TRAINER_LOOPS_REFUSAL}")

    def replace(self, **loops: Any) -> NoReturn:
        raise RefusedError(f"{self._where}.replace({', '.join(loops)}=...): {TRAINER_LOOPS_REFUSAL}")

    def run(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise RefusedError(f"{self._where}.run(): {TRAINER_LOOPS_REFUSAL}")

    def _state_dict_place(self) -> tuple[str, str]:
        """Where the loop's state is in a checkpoint's Lightning ``loops``: the entry and its keys' prefix."""
        raise AttributeError(f"`{self._where}` has no state_dict in Lightning 2.6")

    def state_dict(self) -> dict[str, Any]:
        """Lightning's ``_Loop.state_dict()``: the loop's progress as a checkpoint saved now holds it."""
        from trainmesh.trainer.checkpointing import lightning_loops_of

        entry, prefix = self._state_dict_place()
        saved = lightning_loops_of(cast(Any, self._owner)._state)[entry]
        if entry == "fit_loop":  # the epochs as counted (a resume's restart counts them its own way: fit_loop.py)
            epochs = self._counters.epochs
            saved["epoch_progress"] = {"total": vars(epochs.total).copy(), "current": vars(epochs.current).copy()}
        return {key[len(prefix) :]: value for key, value in saved.items() if key.startswith(prefix)}

    def load_state_dict(self, state_dict: dict[str, Any], prefix: str = "") -> NoReturn:
        raise RefusedError(
            f"{self._where}.load_state_dict(): trainmesh's loops are views of the Trainer's loop state; resume "
            "a fit with trainer.fit(model, ckpt_path=...), which restores them as Lightning's do"
        )


class EvaluationLoopView(_View):
    """Lightning 2.6's ``_EvaluationLoop`` as read: ``batch_progress``, ``max_batches``, ``num_dataloaders``."""

    __slots__ = ("_loop", "_where")
    _loop: str

    def __init__(self, owner: LoopOwner, counters: LoopCounters, loop: str, where: str) -> None:
        """``loop``: which of the counters (``fit_validation``, ``validate``, ``test``)."""
        super().__init__(owner, counters)
        object.__setattr__(self, "_loop", loop)
        object.__setattr__(self, "_where", where)

    def _progress(self) -> Progress:
        progress: Progress = getattr(self._counters, self._loop)
        return progress

    def _state_dict_place(self) -> tuple[str, str]:
        places = {"fit_validation": ("fit_loop", "epoch_loop.val_loop."), "validate": ("validate_loop", "")}
        return places.get(self._loop, ("test_loop", ""))

    @property
    def batch_progress(self) -> ProgressCopy:
        return ProgressCopy.of(self._progress())

    @property
    def max_batches(self) -> list[int | float]:
        return list(self._progress().max_batches)

    @property
    def num_dataloaders(self) -> int:
        return len(self._progress().max_batches)


class TrainingBatchLoopView(_View):
    """pytorch-lightning 1.x's ``trainer.fit_loop.epoch_loop.batch_loop``: ``connect(optimizer_loop=...)`` with
    a subclass of ``trainmesh.loops.OptimizerLoop`` (its ``manual_loop``, ``run`` and ``replace``: refused)."""

    __slots__ = ()
    _where = "trainer.fit_loop.epoch_loop.batch_loop"

    def connect(self, optimizer_loop: Any = None, manual_loop: Any = None) -> None:  # type: ignore[override]
        if manual_loop is not None:
            raise RefusedError(f"{self._where}.connect(manual_loop=...): {TRAINER_LOOPS_REFUSAL}")
        if optimizer_loop is not None:
            self._owner._connect_optimizer_loop(optimizer_loop)


class TrainingEpochLoopView(_View):
    """Lightning 2.6's ``_TrainingEpochLoop`` as read (``trainer.fit_loop.epoch_loop``)."""

    __slots__ = ()
    _where = "trainer.fit_loop.epoch_loop"

    def _state_dict_place(self) -> tuple[str, str]:
        return "fit_loop", "epoch_loop."

    @property
    def batch_progress(self) -> ProgressCopy:
        # Lightning's is_last_batch is the Trainer's (set as each batch is fetched)
        return ProgressCopy.of(self._counters.train_batches, is_last_batch=self._owner.is_last_batch)

    # Lightning's is a plain attribute a program may set at any time (RAVE's and SonyCSL's scripts before fit,
    # Fengshen's modules in on_load_checkpoint): the loggers' next steps count on from it, and a resume's
    # checkpoint overwrites it, as there
    _running_writes = frozenset({"_batches_that_stepped"})

    @property
    def _batches_that_stepped(self) -> int:
        """The batches that ended with an optimizer step: the step the loggers are given."""
        return self._owner.loop.batches_stepped

    @_batches_that_stepped.setter
    def _batches_that_stepped(self, value: int) -> None:
        cast(LoopPosition, self._owner.loop).batches_stepped = value  # (the Trainer's loop state, read-only typed)

    @property
    def global_step(self) -> int:
        return self._owner.global_step

    @property
    def batch_idx(self) -> int:
        return self._counters.train_batches.current.ready - 1

    @property
    def total_batch_idx(self) -> int:
        return self._counters.train_batches.total.ready - 1

    @property
    def max_steps(self) -> int:
        return self._owner.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self._owner.max_steps = value

    @property
    def min_steps(self) -> int | None:
        return self._owner.min_steps

    @min_steps.setter
    def min_steps(self, value: int | None) -> None:
        self._owner.min_steps = value

    @property
    def automatic_optimization(self) -> SimpleNamespace:
        """Its ``optim_progress`` as read (``optimizer.step``: the optimizer steps of automatic optimization,
        whose total is ``global_step``; 0 under manual optimization, as Lightning's)."""
        module = cast(Any, self._owner).lightning_module
        automatic = module is None or module.automatic_optimization
        counters = self._counters
        total, current = (self._owner.global_step, counters.epoch_steps) if automatic else (0, 0)
        # ready ahead of completed: a step begun (its closure running) or the offset a resumed fit restored
        pending = int(counters.step_pending) if automatic else 0
        ahead = (
            (counters.steps_ready_ahead + pending, counters.current_steps_ready_ahead + pending)
            if automatic
            else (0, 0)
        )
        step = ProgressCopy(
            Tracker(total + ahead[0], total, total, total),
            Tracker(current + ahead[1], current, current, current),
            False,
        )
        zero_grad = ProgressCopy.of(self._counters.zero_grads, is_last_batch=False)
        return SimpleNamespace(optim_progress=OptimizationProgressCopy(OptimizerProgressCopy(step, zero_grad)))

    @property
    def manual_optimization(self) -> ManualOptimizationView:
        """Its ``optim_step_progress``, which a program advances to count its own steps (manual_step_progress.py)."""
        return ManualOptimizationView(cast(ManualStepOwner, self._owner))

    @property
    def batch_loop(self) -> TrainingBatchLoopView:
        """1.x's ``TrainingBatchLoop``: only its ``connect(optimizer_loop=...)``."""
        return TrainingBatchLoopView(self._owner, self._counters)

    @property
    def val_loop(self) -> EvaluationLoopView:
        return EvaluationLoopView(self._owner, self._counters, "fit_validation", f"{self._where}.val_loop")


class FitLoopView(_View):
    """Lightning 2.6's ``_FitLoop`` as read (``trainer.fit_loop``)."""

    __slots__ = ()
    _where = "trainer.fit_loop"
    # A callback lengthening the running fit by a forward-only epoch (Lightning's StochasticWeightAveraging
    # on a model with batch norm: callbacks/stochastic_weight_avg.py) writes these three
    _running_writes = frozenset({"max_epochs", "max_batches", "_skip_backward"})

    def _state_dict_place(self) -> tuple[str, str]:
        return "fit_loop", ""

    @property
    def restarting(self) -> bool:
        """Lightning's: a fit resumed inside an epoch (or bounded by max_steps), until that first epoch
        ends (a callback reads it to tell a resumed epoch from a new one)."""
        # the Trainer's loop position (loop_state.LoopPosition) holds it through that epoch (fit_start.py)
        return bool(getattr(self._owner.loop, "plateau_held", False))

    @property
    def max_epochs(self) -> int:
        return self._owner.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int) -> None:
        self._owner.max_epochs = value  # the running fit reads it at each epoch's end (stop_limits.py)

    @property
    def min_epochs(self) -> int | None:  # Lightning's _parse_loop_limits as a fit starts: trainer_fields.py
        return self._owner.min_epochs

    @min_epochs.setter
    def min_epochs(self, value: int | None) -> None:
        self._owner.min_epochs = value

    @property
    def max_steps(self) -> int:  # no setter in Lightning 2.6 either: epoch_loop.max_steps is the one written
        return self._owner.max_steps

    @property
    def min_steps(self) -> int | None:
        return self._owner.min_steps

    @property
    def max_batches(self) -> int | float:
        return self._owner.num_training_batches

    @max_batches.setter
    def max_batches(self, value: int | float) -> None:
        """What ``trainer.num_training_batches`` reads from now on in this fit; the loader is read as
        before (its own count of batches, its validation cadence), as Lightning's."""
        counted = self._owner.num_training_batches
        if math.isinf(counted) and value == counted:  # no length: inf + 1 is inf, as in Lightning
            return
        if math.isinf(counted) or math.isinf(value):
            raise ValueError(
                f"trainer.fit_loop.max_batches = {value}: the train loader's batches are {counted}; trainmesh "
                "changes what trainer.num_training_batches reads by a count, which needs both to be finite"
            )
        self._position().added_batches += int(value - counted)

    @property
    def _skip_backward(self) -> bool:
        """Lightning's switch (its automatic optimization's): True runs training_step without zero_grad
        and backward, from the next batch on, until it is set back; the loop's ``forward_only``."""
        return self._position().forward_only

    @_skip_backward.setter
    def _skip_backward(self, value: bool) -> None:
        self._position().forward_only = bool(value)

    def _position(self) -> LoopPosition:
        return cast(LoopPosition, self._owner.loop)

    def setup_data(self) -> None:
        """Lightning's: the fit's train loader made now (``trainer.train_dataloader`` set), where it was not yet."""
        self._owner._load_train_loader()

    @property
    def epoch_progress(self) -> EpochProgressCopy:
        epochs = self._counters.epochs
        return EpochProgressCopy(_tracker(epochs.total), _tracker(epochs.current))

    @property
    def epoch_loop(self) -> TrainingEpochLoopView:
        return TrainingEpochLoopView(self._owner, self._counters)

    @property
    def batch_idx(self) -> int:
        return self.epoch_loop.batch_idx

    @property
    def total_batch_idx(self) -> int:
        return self.epoch_loop.total_batch_idx

    @property
    def running_loss(self) -> NoReturn:
        raise AttributeError(
            "`trainer.fit_loop.running_loss` (pytorch-lightning 1.x's window of recent losses) is not kept by "
            "trainmesh, as Lightning 2.x removed it: log the loss with self.log('train_loss', loss, "
            "prog_bar=True) and read trainer.callback_metrics['train_loss'] or trainer.progress_bar_metrics."
        )
