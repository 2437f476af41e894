"""A stage's end in one process: after a success the teardown hooks (Lightning's order), after a
failure the exception hooks instead; the loggers finalized with the run's status either way."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from trainmesh.callbacks.base import defines_hook
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.keyboard_interrupt import shut_down_on_interrupt
from trainmesh.trainer.logging_hooks import NO_LOOP
from trainmesh.trainer.states import end_run, hook_stage, interrupt_run

if TYPE_CHECKING:
    from trainmesh.trainer.stage_trainer import StageTrainer


# A run whose on_exception hook raised: that error reaches the caller (the run's own its context), and
# the rest of Lightning's ``_interrupt`` never runs (the later hooks, the loggers' finalize("failed")).
HOOK_RAISED = "on_exception raised"


def on_stage_failure(trainer: StageTrainer, exc: BaseException) -> tuple[str, BaseException]:
    """A stage that raised ``exc``: the exception hooks called; the stage's status and what the Trainer
    raises (after Ctrl-C on one process Lightning's ``SystemExit(1)``, keyboard_interrupt.py)."""
    if isinstance(exc, KeyboardInterrupt):
        on_exception = functools.partial(on_stage_exception, trainer)
        return "interrupted", shut_down_on_interrupt(on_exception, trainer.world_size, exc)
    on_stage_exception(trainer, exc)
    return "failed", exc


def on_stage_exception(trainer: StageTrainer, exc: BaseException) -> None:
    """A stage that raised: its state interrupted, the exception hooks called (Lightning's on_exception).
    Not in a spawned worker: Lightning calls them in the launching process only (on_spawned_exception)."""
    interrupt_run(trainer._state.trainer_state)
    if trainer._state.hooks is not None and not trainer.runtime.process.reports_to_parent:
        trainer._state.hooks.call_exception_hooks(exc, trainer.datamodule)


def on_spawned_exception(trainer: StageTrainer, exc: BaseException, model: Any, datamodule: Any) -> None:
    """A stage whose spawned workers raised, in the launching process, as Lightning's ``_interrupt`` there:
    the state interrupted, the callbacks' ``on_exception`` with this process's exception (torch's
    ``ProcessRaisedException``), then the data module's; a hook's own error propagates, as Lightning's."""
    interrupt_run(trainer._state.trainer_state)
    for callback in trainer.callbacks:
        if defines_hook(callback, "on_exception"):
            callback.on_exception(trainer, model, exc)
    if datamodule is not None and callable(getattr(datamodule, "on_exception", None)):
        datamodule.on_exception(exc)


def finish_stage(trainer: StageTrainer, data: DataSource, stage: str, status: str) -> None:
    """A stage's end: the teardown hooks after a success, the loggers finalized, the profiler's report."""
    if status == "success" and trainer._state.hooks is not None:
        # Lightning's order: the data module, the callbacks, the module. After a failure Lightning
        # calls no teardown hook (on_exception ran), and neither does trainmesh.
        data.teardown(stage)
        trainer._state.hooks.call_callbacks("teardown", stage=hook_stage(stage))
        trainer._state.hooks.call_module("teardown", stage=hook_stage(stage))
    if stage == "fit" and trainer._layer_sync is not None and trainer.world_size > 1:
        trainer._layer_sync.revert(trainer.model)  # batch norms again after fit, as Lightning's strategies leave them
    keep_stage = status in ("interrupted", HOOK_RAISED)
    end_run(trainer._state.trainer_state, succeeded=status == "success", keep_stage=keep_stage)
    if not keep_stage:  # no loop runs now: self.log raises, as Lightning's without one (logging_hooks.py)
        trainer._state.log_collector.hook = trainer._state.log_collector.fx = NO_LOOP
    if status == HOOK_RAISED:
        return
    for logger in trainer.loggers:  # on every rank, as Lightning's (its loggers are rank-zero-only themselves)
        logger.finalize(status)
    if status == "success":
        trainer.profiler.describe()  # the stage's report, as Lightning writes it
