"""What spawned workers send back to the process that called ``fit``/``test``.

Under ``ddp_spawn`` the training happens in child processes; rank 0 returns this, and the
parent adopts it so that after ``fit`` its model holds the trained weights and its trainer the
metrics, the best checkpoint's path and the loggers' version folders, as in one process. As
Lightning's launcher, weights come back after ``fit`` only, and ``callback_metrics`` are updated
with the workers' (not replaced).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trainmesh.callbacks.base import callback_states, load_callback_state
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.metric_values import metric_tensor
from trainmesh.trainer.states import TrainerFn, TrainerState, TrainerStatus
from trainmesh.trainer_view import TrainerView


@dataclass
class WorkerOutcome:
    result: Any
    state_dict: dict[str, torch.Tensor]
    metrics: dict[str, float]
    logged_metrics: dict[str, float]
    current_epoch: int
    global_step: int
    # The loggers' step (Lightning's _batches_that_stepped): what a later stage logs at, as after a
    # fit in one process (without it, a test after a spawned fit logged at step 0).
    batches_stepped: int = 0
    wide_metrics: set[str] = field(default_factory=set)  # the callback_metrics given as float64, as logged
    callback_states: dict[str, Any] = field(default_factory=dict)
    # One entry per logger (None: it keeps no version). The parent never ran the logger set-up:
    # without these, its logger would pick the next free version, and the folder it reports
    # (and the one the next stage's workers log to) would not be the one the workers wrote.
    logger_versions: list[int | str | None] = field(default_factory=list)
    stage: str | None = None  # the entry point the workers ran (trainer.state.fn)

    @classmethod
    def capture(cls, trainer: TrainerView, result: Any) -> WorkerOutcome:
        weights = trainer.runtime.state_dicts(trainer.model, [])["model"]
        return cls(
            result=result,
            state_dict={k: v.detach().cpu() for k, v in weights.items()},
            # Floats across the process boundary: a step value may be a tensor on the worker's device.
            metrics={name: float(value) for name, value in trainer.callback_metrics.items()},
            logged_metrics={name: float(value) for name, value in trainer.logged_metrics.items()},
            current_epoch=trainer.current_epoch,
            global_step=trainer.global_step,
            batches_stepped=trainer.loop.batches_stepped,
            wide_metrics={name for name, value in trainer.callback_metrics.items() if _is_float64(value)},
            callback_states=callback_states(trainer.callbacks),
            logger_versions=[logger.version if hasattr(logger, "_version") else None for logger in trainer.loggers],
            stage=trainer.stage,
        )

    def adopt(self, state: LoopState, trainer: TrainerView, model: Any) -> Any:
        """Copy the workers' end state into this process's loop state (and ``trainer``'s callbacks
        and loggers); returns the stage's result."""
        if self.stage == "fit":
            # Lightning's launcher brings weights back after fit only: after validate/test/predict(ckpt_path=...)
            # the launching process keeps the fit's last weights, not the checkpoint's the workers loaded.
            model.load_state_dict(self.state_dict)
        state.module = model
        # Lightning's launching process updates its callback_metrics with the workers' (a validate after a
        # fit leaves the fit's train_loss beside the new val_loss there), where one process starts afresh.
        kept = {name: value for name, value in state.epoch_metrics.items() if name not in self.metrics}
        state.epoch_metrics = {**kept, **self.metrics}
        state.wide_metrics = {name for name in state.wide_metrics if name in kept} | set(self.wide_metrics)
        state.logged_metrics = {name: metric_tensor(value) for name, value in self.logged_metrics.items()}
        state.current_epoch, state.global_step = self.current_epoch, self.global_step
        state.loop.batches_stepped = self.batches_stepped
        # As Lightning's spawn launcher: the workers' finished state (states.py)
        state.trainer_state = TrainerState(TrainerStatus.FINISHED, TrainerFn(self.stage) if self.stage else None)
        for callback in trainer.callbacks:
            load_callback_state(callback, self.callback_states)
        for logger, version in zip(trainer.loggers, self.logger_versions):
            if version is not None:
                logger.agree_on_version(lambda _own, version=version: version)  # rank 0's, as in the workers
            keep = getattr(logger, "keep_this_run_s_file", None)  # trainmesh's CSVLogger: the workers' rows stay
            if callable(keep):
                keep()
        return self.result


def _is_float64(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.float64
