"""The loop's state: one typed value the loops own and the Trainer's properties read.

``LoopState`` is where the run is (stage, epoch, step, batch counts, stop flags), its metrics,
and what it trains (module, model, optimizers, schedulers, the log collector, the hooks).
What a loop function works with besides it is ``loop_context.LoopContext``. The Trainer exposes
the Lightning-compatible names (``trainer.current_epoch``, ...) as ``StateField`` properties.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from trainmesh.trainer.loop_progress import EpochLoopStart, LoopCounters
from trainmesh.trainer.prediction_loop import PredictLoop
from trainmesh.trainer.states import RunningStage, TrainerState

if TYPE_CHECKING:
    from trainmesh.manual_calls import ManualBackward
    from trainmesh.trainer.finite_loss import FiniteLossCheck
    from trainmesh.trainer.hooks import HookDispatcher
    from trainmesh.trainer.optimizers import SchedulerConfig
    from trainmesh.trainer.results import LogCollector, StageResults
    from trainmesh.trainer.val_clock import ValClock
    from trainmesh.trainer_view import ManualSteps


@dataclass
class LoopPosition:
    """Where the fit loop is; saved in every checkpoint."""

    batches_done: int = 0  # training batches finished in the current epoch
    # A named resume under max_steps of a checkpoint whose epoch counted completed (lightning_resume.py):
    # the epoch is not started in Lightning's counts (its on_train_epoch_start runs), its batches count on
    epoch_not_started: bool = False
    # Lightning's counts across the fit's epochs: the batches trained (its total_batch_idx + 1, which
    # check_val_every_n_epoch=None validates by), and those that ended with an optimizer step (its
    # _batches_that_stepped: the step the loggers are given).
    total_batches: int = 0
    batches_stepped: int = 0
    min_not_met_told: bool = False  # Lightning says once that a stop waits for min_epochs/min_steps
    # Set while validation runs after a batch that is not the epoch's last (ModelCheckpoint saves in its
    # on_validation_end then, as Lightning's); that batch's optimizer step is not in batches_stepped yet,
    # and a checkpoint taken then counts it (stepped_pending).
    mid_epoch_validation: bool = False
    stepped_pending: int = 0
    # Set while validation runs after the epoch's last batch: a checkpoint taken then (ModelCheckpoint
    # with save_on_train_epoch_end=False, in its on_validation_end as Lightning's) holds the schedulers
    # before the epoch's plateau step and resumes with the next epoch without it (Lightning's restart).
    epoch_end_validation: bool = False
    epoch_finished: bool = False
    # Resumed from a checkpoint taken in the validation after the epoch's last batch: the epoch's
    # end (its on_train_epoch_end hooks) is still to run, without its schedulers (Lightning's restart).
    epoch_end_due: bool = False
    # Lightning's fit_loop.restarting, which holds through the first epoch of a resumed fit (restart.py):
    # that epoch's end steps no ReduceLROnPlateau (its metric is not in the checkpoint). Not saved.
    plateau_held: bool = False
    # The epoch's batches are done and their epoch values published (its on_train_epoch_end
    # hooks run): callback_metrics shows those, not the last step's. A checkpoint taken then
    # resumes with the next epoch, without the epoch's plateau step (Lightning's restart).
    epoch_ending: bool = False
    epoch_start_rng: dict[str, Any] | None = None  # RNG just before the epoch's loader started
    # A resume of Lightning's checkpoint: its stateful train loaders' states, loaded as the fit's data starts
    loader_states: list[dict[str, Any]] = field(default_factory=list)
    last_loss: torch.Tensor | None = None
    # The epoch's step outputs, kept (detached) only for a module that defines training_epoch_end.
    epoch_outputs: list[Any] = field(default_factory=list)
    stopped_inside: StoppedInsideEpoch | None = None  # set when max_steps ended the fit mid-epoch
    loss_check: FiniteLossCheck | None = None  # set for fit (finite_loss.py)
    # Seconds this process has waited for training batches (the loader's next()), for the
    # ThroughputMonitor's data-wait share; a figure of this run, not saved in checkpoints.
    data_seconds: float = 0.0
    # The step-interval schedulers stepped with a metric that are due after this batch: Lightning steps
    # them after its on_train_batch_end and validation, which may log the metric (not saved).
    plateau_due: list[Any] = field(default_factory=list)
    # Lightning's ``fit_loop._skip_backward`` (a callback sets it, through trainer.fit_loop: loop_views.py):
    # automatic optimization runs training_step with its hooks and logging, but no zero_grad and no
    # backward (StochasticWeightAveraging's batch-norm epoch); the optimizer still steps where a window
    # ends, on whatever gradients are there. And what ``trainer.fit_loop.max_batches`` was raised by:
    # what trainer.num_training_batches reads beyond the loader's count (the loader and the validation
    # cadence keep theirs, as Lightning's, which settled them when the loader was set up). Not saved.
    forward_only: bool = False
    added_batches: int = 0
    # A resumed fit's batch counts and stepped batches as its first epoch loop starts (restart_counts.py):
    # until then it shows the checkpoint's, as Lightning's restored loops do. Not saved.
    epoch_loop_start: EpochLoopStart | None = None


@dataclass
class StoppedInsideEpoch:
    """Where max_steps ended the fit with batches of the epoch still untrained.

    Taken before the epoch's end-of-epoch reporting runs (see ``epoch_end.end_epoch``): a
    checkpoint written during or after that reporting records this position, so a resume with a
    larger max_steps or max_epochs trains the rest of the epoch, as the run that never stopped does.
    """

    epoch: int
    batches_done: int
    rng: dict[str, Any]  # this process's generators when the last step ended
    train_results: dict[str, Any]  # this process's epoch accumulators (copied: hooks may log more)
    epoch_outputs: list[Any]


_COUNT_OF_STAGE = {
    "validate": "val_loader_batches",
    "sanity_check": "val_loader_batches",
    "test": "test_loader_batches",
    "predict": "predict_loader_batches",
}


@dataclass
class LoopState:
    """Everything a run changes as it goes; one per Trainer, kept across its fit/validate/test calls."""

    log_collector: LogCollector
    stage: str | None = None
    current_epoch: int = 0
    global_step: int = 0
    should_stop: bool = False
    should_stop_set_at: str = ""  # "file:line in hook" of the latest trainer.should_stop = True (StopFlag)
    trainer_state: TrainerState = field(default_factory=TrainerState)  # Lightning's trainer.state (states.py)
    stage_before_check: RunningStage | None = None  # the stage the sanity check returns to
    num_training_batches: int | float = math.inf  # Lightning's before a fit counts its loader
    val_clock: ValClock | None = None  # a time-based val_check_interval's, started as fit sets up its train loader
    # The batch count of the loader an evaluation runs now: what the progress bar and the
    # profiler's schedule count to (the Trainer's num_*_batches are Lightning's per-loader lists).
    val_loader_batches: int | float = 0
    test_loader_batches: int | float = 0
    predict_loader_batches: int | float = 0
    # Lightning's per-loader lists, by loop ("fit", "validate", "test", "predict"): set as the
    # loop's loaders are made, kept after the run (trainer.num_val_batches, ...).
    batch_counts: dict[str, list[int | float]] = field(default_factory=dict)
    # The checkpoint this run resumed (or loaded weights) from: ModelCheckpoint never deletes it.
    ckpt_path: str | None = None
    # the program set trainer.ckpt_path itself: runs given no ckpt_path load it (checkpoint_paths.program_ckpt_path)
    ckpt_user_managed: bool = False
    # fit(ckpt_path=...) named by the program without Trainer(exact_resume=True): resumed as Lightning
    # resumes (checkpointing.restore_checkpoint); trainmesh's automatic resume continues exactly
    named_resume: bool = False
    epoch_metrics: dict[str, float] = field(default_factory=dict)
    logged_metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    # What callbacks wrote into trainer.callback_metrics (LearningRateMonitor's rates, a user's own
    # values): kept until the run ends, as Lightning's callback_metrics dict keeps them.
    written_metrics: dict[str, Any] = field(default_factory=dict)
    # What the last read of callback_metrics computed from the logs (publishing.callback_metrics).
    computed_metrics: dict[str, Any] = field(default_factory=dict)
    # The epoch_metrics whose value Lightning gives as float64 (a float64 tensor was logged), not float32.
    wide_metrics: set[str] = field(default_factory=set)
    # The progress bar's epoch values (prog_bar=True), by Lightning's names: each the last one logged
    # for the bar under that name (callback_metrics may hold a later hook's value not logged for the bar).
    bar_epoch_metrics: dict[str, float] = field(default_factory=dict)
    # The progress bar's step values kept beyond their loop, as Lightning's bar dict keeps them: evaluation
    # steps' (on_step=True, prog_bar=True), and a training epoch's last step's once the next epoch starts.
    bar_step_metrics: dict[str, float] = field(default_factory=dict)
    # Lightning's count of each evaluation loop's batches per loader ("fit": the fit's validation,
    # counted on across its runs until its loaders are asked for again; "validate", "test": per call):
    # the step the loggers get a validation/test step's values at.
    eval_step_counts: dict[str, dict[int, int]] = field(default_factory=dict)
    train_results: StageResults | None = None
    loop: LoopPosition = field(default_factory=LoopPosition)
    # What the run trains, set when a stage is prepared.
    module: Any = None
    model: Any = None
    datamodule: Any = None
    optimizers: list[Any] = field(default_factory=list)
    lr_scheduler_configs: list[SchedulerConfig] = field(default_factory=list)
    optimizer_frequencies: list[int] = field(default_factory=list)  # Lightning 1.x's, per optimizer ([]: none)
    optimizer_loop: Any = None  # a 1.x OptimizerLoop subclass connected by the program (loops/optimization)
    hooks: HookDispatcher | None = None
    val_loaders: list[Any] = field(default_factory=list)
    # manual_calls.ManualBackward, set by fit for a manual-optimization module
    manual_backward: ManualBackward | None = None
    manual_steps: ManualSteps | None = None  # what Module.optimizers() wraps each optimizer with
    prepared_module_id: int | None = None  # the model configure_model and placement ran for
    predict_loop: PredictLoop = field(default_factory=PredictLoop)  # trainer.predict_loop
    progress: LoopCounters = field(default_factory=LoopCounters)  # trainer.fit_loop, validate_loop, test_loop
    # Lightning's trainer.train_dataloader, val_dataloaders, ...: the loaders each kind last asked for
    # ("train", "validate", "test", "predict") in the current or latest run.
    stage_loaders: dict[str, list[Any]] = field(default_factory=dict)
    stage_shapes: dict[str, Any] = field(default_factory=dict)  # each kind's loaders as the program gave them
    is_last_batch: bool = False  # the training batch in hand is its epoch's last (trainer.is_last_batch)
    none_batch_told: bool = False  # Lightning warns once per Trainer of a None batch (train_batch_start.py)
    fit_data: Any = None  # the fit's loaders (fit_data.FitData, which imports this module), set when a fit is prepared

    @property
    def sanity_checking(self) -> bool:
        return self.trainer_state.stage == RunningStage.SANITY_CHECKING

    @sanity_checking.setter
    def sanity_checking(self, value: bool) -> None:
        """The loop's: the sanity check enters its stage, then returns to the one before (Lightning's)."""
        if value:
            self.stage_before_check, self.trainer_state.stage = self.trainer_state.stage, RunningStage.SANITY_CHECKING
        else:
            self.trainer_state.stage = self.stage_before_check

    def start_run_metrics(self) -> None:
        """Each run starts with no metrics, as Lightning's (its reset_metrics before the strategy's
        setup): after a fit, validate/test hold their own values only; each run asks for its loaders
        afresh (Lightning's attach_dataloaders)."""
        self.train_results, self.bar_epoch_metrics, self.wide_metrics = None, {}, set()
        self.epoch_metrics, self.logged_metrics, self.written_metrics = {}, {}, {}
        self.computed_metrics, self.bar_step_metrics = {}, {}
        self.stage_loaders, self.stage_shapes = {}, {}

    def set_batch_count(self, stage: str, count: int | float) -> None:
        """The batch count of the loader an evaluation stage runs now (``val_loader_batches``, ...)."""
        setattr(self, _COUNT_OF_STAGE[stage], count)


T = TypeVar("T")


class StateField(Generic[T]):
    """A Trainer property reading and writing one field of ``holder`` (the Trainer's ``_state``,
    or its frozen ``_settings``, which a write replaces: users may still set ``trainer.max_epochs``)."""

    def __init__(self, holder: str) -> None:
        self.holder, self.name = holder, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        # Callbacks read some on every step (trainer.global_step): as a property whose getter is
        # C (operator.attrgetter) a read makes no Python call, which ``__get__`` would.
        getter = operator.attrgetter(f"{self.holder}.{name}")
        setattr(owner, name, property(getter, self.__set__, doc=f"The loop's {name} (``{self.holder}.{name}``)."))

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        return getattr(getattr(obj, self.holder), self.name)  # type: ignore[no-any-return]

    def __set__(self, instance: Any, value: T) -> None:
        held = getattr(instance, self.holder)
        params = getattr(held, "__dataclass_params__", None)  # a dataclass instance's
        if params is not None and params.frozen:
            setattr(instance, self.holder, dataclasses.replace(held, **{self.name: value}))
        else:
            setattr(held, self.name, value)


class StopFlag(StateField[bool]):
    """``trainer.should_stop``, which also records where it was set True (``should_stop_set_at``): the
    supervision names that line when a rank ends its fit on it while another waits (departure_report.py)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        setattr(owner, name, property(operator.attrgetter(f"{self.holder}.{name}"), self.__set__, doc=self.__doc__))

    def __set__(self, instance: Any, value: bool) -> None:
        state = getattr(instance, self.holder)
        if value and not state.should_stop:
            caller = sys._getframe(1)  # the line that set it (a hook's, a callback's): once per stop, never per step
            code = caller.f_code
            state.should_stop_set_at = f"{os.path.basename(code.co_filename)}:{caller.f_lineno} in {code.co_name}"
        state.should_stop = value
