"""The Trainer's read-only properties of where the run is (its strategy, ranks, loggers,
metrics, the callbacks Lightning names) and Lightning's ``trainer.state`` with its flags
(states.py): kept out of trainer.py, which holds the loop's entry points."""

from __future__ import annotations

import os
from typing import Any

import torch

from trainmesh.runtime import Runtime
from trainmesh.trainer import publishing
from trainmesh.trainer.states import RunningStageFlags
from trainmesh.utilities.lazy import is_instance


class RunProperties(RunningStageFlags):
    """Where the run is, for callbacks and the Module; the Trainer is one."""

    runtime: Runtime
    _loggers: list[Any]
    callbacks: list[Any]
    default_root_dir: str
    module: Any

    # ---- where the run is ---------------------------------------------------------------------
    @property
    def precision(self) -> str:
        return self.runtime.precision.name

    @property
    def global_rank(self) -> int:
        return self.runtime.trainer_port.place.global_rank

    @property
    def local_rank(self) -> int:
        return self.runtime.trainer_port.place.local_rank

    @property
    def world_size(self) -> int:
        return self.runtime.trainer_port.place.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.runtime.trainer_port.place.is_global_zero

    @property
    def loggers(self) -> list[Any]:
        return self._loggers

    @loggers.setter
    def loggers(self, loggers: list[Any] | None) -> None:
        self._loggers = list(loggers) if loggers else []  # None or [] is no logger (Lightning's setter)

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Any) -> None:
        self.loggers = [logger] if logger else []  # as Lightning's: None (or False) leaves no logger

    @property
    def log_dir(self) -> str:
        if not self.loggers:
            return self.default_root_dir
        logger = self.loggers[0]
        folder = getattr(logger, "log_dir", None)
        if folder is not None:
            return str(folder)
        # A logger naming no folder (Lightning's Logger default): the folder Lightning's ModelCheckpoint
        # builds for it, <save_dir or default_root_dir>/<name>/<version> (Lightning's trainer.log_dir is None).
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        return os.path.join(getattr(logger, "save_dir", None) or self.default_root_dir, str(logger.name), version)

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest value of every logged metric (scalar tensors); see publishing.callback_metrics."""
        return publishing.callback_metrics(self._state)

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What went to the loggers, and this step's values for them; see publishing.logged_metrics."""
        return publishing.logged_metrics(self._state)

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        return publishing.progress_bar_metrics(self._state)

    @property
    def checkpoint_callback(self) -> Any:
        from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

        return next((cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)), None)

    @property
    def early_stopping_callback(self) -> Any:
        early_stopping = "trainmesh.callbacks.early_stopping"  # not imported by a run without one
        return next((cb for cb in self.callbacks if is_instance(cb, early_stopping, "EarlyStopping")), None)
