"""The Trainer's settings and loop state as properties (``trainer.max_epochs``, ``trainer.global_step``):
``StateField`` descriptors over its checked settings and its ``LoopState``, kept out of trainer.py."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from trainmesh.runtime_optimizer import inner_optimizer
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.trainer.lightning_members import LightningMembers
from trainmesh.trainer.loop_state import LoopPosition, StateField, StopFlag
from trainmesh.trainer.optimizers import SchedulerConfig
from trainmesh.trainer.prediction_loop import PredictLoop
from trainmesh.trainer.results import LogCollector
from trainmesh.trainer.settings import given_max_epochs, given_min_epochs


class TrainerFields(LightningMembers):
    """The Trainer's fields; the Trainer is one."""

    # ---- the checked settings (settings.py) -----------------------------------------------------
    @property
    def fast_dev_run(self) -> int | bool:
        """Lightning's ``trainer.fast_dev_run``: True for one batch, the number of batches above one, else False."""
        value: int = self._settings.fast_dev_run
        return True if value == 1 else value or False

    max_steps: StateField[int] = StateField("_settings")

    @property
    def max_epochs(self) -> int | None:
        """Lightning's: as given (None where not) until a fit starts, then 1000 or -1 for None."""
        return given_max_epochs(self._settings)

    @max_epochs.setter
    def max_epochs(self, value: int | None) -> None:  # trainer.fit_loop.max_epochs = value, between fits
        resolved = value if value is not None else 1000 if self._settings.max_steps == -1 else -1
        self._settings = dataclasses.replace(
            self._settings,
            max_epochs=resolved,
            max_epochs_given=value is not None,
            max_epochs_unset=value is None and self._settings.max_steps == -1,
            limits_settled=value is not None and self._settings.limits_settled,
        )

    @property
    def min_epochs(self) -> int | None:
        """Lightning's: as given until a fit starts, then 0 for None (1 where min_steps is given)."""
        return given_min_epochs(self._settings)

    @min_epochs.setter
    def min_epochs(self, value: int | None) -> None:
        self._settings = dataclasses.replace(self._settings, min_epochs=value)

    min_steps: StateField[int | None] = StateField("_settings")
    limit_train_batches: StateField[int | float] = StateField("_settings")
    limit_val_batches: StateField[int | float] = StateField("_settings")
    limit_test_batches: StateField[int | float] = StateField("_settings")
    limit_predict_batches: StateField[int | float] = StateField("_settings")

    @property
    def val_check_interval(self) -> int | float:
        """Lightning's: the interval as a count or a fraction (1.0 where not given). A time-based one
        leaves Lightning 2.6's trainer without the attribute (``AttributeError``, as ``hasattr`` sees it)
        until something sets it: a callback deciding by ``val_check_interval == 1.0`` would take the
        clock for once an epoch. Its seconds are ``trainer._val_check_time_interval``."""
        if self._settings.val_check_interval_absent:
            raise AttributeError(
                "'Trainer' object has no attribute 'val_check_interval': the Trainer was given a time-based"
                " val_check_interval, which Lightning 2.6's Trainer holds as `trainer._val_check_time_interval`"
                " (seconds) instead; read that, or `trainer.val_check_batch` (None then)"
            )
        interval: int | float = self._settings.val_check_interval
        return interval

    @val_check_interval.setter
    def val_check_interval(self, value: int | float) -> None:  # the clock still decides (Lightning's loops)
        self._settings = dataclasses.replace(self._settings, val_check_interval=value, val_check_interval_absent=False)

    check_val_every_n_epoch: StateField[int | None] = StateField("_settings")

    @property
    def num_sanity_val_steps(self) -> int | float:
        """Lightning's: ``inf`` for ``num_sanity_val_steps=-1`` (every validation batch), else the count."""
        steps: int = self._settings.num_sanity_val_steps
        return math.inf if steps == -1 else steps

    @num_sanity_val_steps.setter
    def num_sanity_val_steps(self, value: int | float) -> None:
        steps = -1 if value == math.inf else value
        self._settings = dataclasses.replace(self._settings, num_sanity_val_steps=steps)

    log_every_n_steps: StateField[int] = StateField("_settings")
    accumulate_grad_batches: StateField[int] = StateField("_settings")
    gradient_clip_val: StateField[float | None] = StateField("_settings")
    gradient_clip_algorithm: StateField[str | None] = StateField("_settings")

    # ---- the loop's state (loop_state.LoopState), read by callbacks and the Module ---------------
    stage: StateField[str | None] = StateField("_state")
    current_epoch: StateField[int] = StateField("_state")
    global_step: StateField[int] = StateField("_state")
    should_stop: StopFlag = StopFlag("_state")
    # num_training_batches: lightning_members.py (what a callback added to the loader's count with it)
    val_loader_batches: StateField[int | float] = StateField("_state")
    test_loader_batches: StateField[int | float] = StateField("_state")
    predict_loader_batches: StateField[int | float] = StateField("_state")
    epoch_metrics: StateField[dict[str, float]] = StateField("_state")
    train_results: StateField[Any] = StateField("_state")
    loop: StateField[LoopPosition] = StateField("_state")
    module: StateField[Any] = StateField("_state")
    model: StateField[Any] = StateField("_state")
    datamodule: StateField[Any] = StateField("_state")

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the last fit/validate/test/predict loaded (None: none), or the one the program set."""
        path: str | None = self._state.ckpt_path
        return path

    @ckpt_path.setter
    def ckpt_path(self, ckpt_path: str | None) -> None:
        """Lightning 2.6's setter: the runs after it given no ``ckpt_path`` load this one, until set to None."""
        self._state.ckpt_path, self._state.ckpt_user_managed = ckpt_path, bool(ckpt_path)

    @property
    def _named_resume(self) -> bool:
        """This fit resumes a ``ckpt_path`` the program named as Lightning resumes it (not
        ``Trainer(exact_resume=True)``, nor an automatic restart): what trainmesh's own callbacks
        that differ between the two read (callbacks/finetuning.py)."""
        return bool(self._state.named_resume)

    @property
    def optimizers(self) -> list[Any]:
        """Lightning's ``trainer.optimizers``: the objects ``configure_optimizers`` returned (the run
        steps them through its own wrappers, ``LoopState.optimizers``, which programs never see)."""
        return [inner_optimizer(optimizer) for optimizer in self._state.optimizers]

    @optimizers.setter
    def optimizers(self, optimizers: list[Any]) -> None:
        # Lightning's setter (``strategy.optimizers = [...]``) takes plain optimizers and wraps them: one the run
        # already steps keeps its wrapper (acorn's EdgeClassifierStage sets the scheduler's own optimizer back
        # at each epoch's start), another is prepared for the strategy as configure_optimizers' are.
        wrapped = {id(inner_optimizer(held)): held for held in self._state.optimizers}
        new = [optimizer for optimizer in optimizers if id(inner_optimizer(optimizer)) not in wrapped]
        wrapped.update(zip((id(o) for o in new), self.runtime.setup_optimizers(*new) if new else ()))
        self._state.optimizers = [wrapped[id(inner_optimizer(optimizer))] for optimizer in optimizers]

    predict_loop: StateField[PredictLoop] = StateField("_state")
    lr_scheduler_configs: StateField[list[SchedulerConfig]] = StateField("_state")
    log_collector: StateField[LogCollector] = StateField("_state")
    hooks: StateField[HookDispatcher | None] = StateField("_state")
    val_loaders: StateField[list[Any]] = StateField("_state")
    manual_backward: StateField[Any] = StateField("_state")
    manual_steps: StateField[Any] = StateField("_state")
