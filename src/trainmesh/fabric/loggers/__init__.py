"""``lightning.fabric.loggers``: Fabric's CSV and TensorBoard loggers over trainmesh's writers.

Fabric's loggers differ from the Trainer's (trainmesh.loggers) in what a Fabric program sees:
the first argument is ``root_dir`` (the folder that holds ``name/version_N``), ``root_dir`` is that
folder, the CSV logger writes every ``flush_logs_every_n_steps`` *steps* (``(step + 1) % n == 0``)
and at ``finalize``/``save``, writes its values as given (a tensor as its ``.item()``), takes no
hyperparameters, and only global rank 0 logs (Fabric's ``rank_zero_only``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from trainmesh.loggers.base import FabricLogger, on_rank_zero
from trainmesh.loggers.csv_logger import CSVLogger as _TrainerCSVLogger
from trainmesh.loggers.csv_logger import next_version, version_dir_name
from trainmesh.loggers.tensorboard import FabricTensorBoardLogger


class _CSVWriter(_TrainerCSVLogger):
    """The files of Fabric's CSV logger, written by the Trainer's CSV writer: ``root_dir`` is the folder
    that holds ``name/version_N``, rows flushed every ``flush_logs_every_n_steps`` *steps*, values as
    given. Private: a Trainer logger by its base, which Fabric's logger must not be (below).
    """

    @property
    def root_dir(self) -> str:
        return self.save_dir

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(os.path.join(self.save_dir, self.name))
        return self._version

    @property
    def log_dir(self) -> str:
        return os.path.join(self.save_dir, self.name, version_dir_name(self.version))

    def log_hyperparams(self, params: Any = None) -> None:
        if on_rank_zero():
            raise NotImplementedError("The `CSVLogger` does not yet support logging hyperparameters.")

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not on_rank_zero():
            return
        prefix = self._prefix
        row = {
            (f"{prefix}-{key}" if prefix else key): value.item() if isinstance(value, torch.Tensor) else value
            for key, value in metrics.items()
        }
        step = len(self._buffer) if step is None else step
        row["step"] = step
        self._check_log_dir()
        self._buffer.append(row)
        if (step + 1) % self._flush_every_n_steps == 0:  # by steps, where the Trainer's counts calls
            self.save()

    def save(self) -> None:
        if on_rank_zero():
            super().save()

    def finalize(self, status: str) -> None:
        self.save()


class CSVLogger(FabricLogger):
    """Fabric's CSV logger: ``root_dir/name/version_N/metrics.csv``.

    A Fabric logger, not a Trainer one, as Lightning's: under the Trainer's ``Logger`` a
    LightningCLI's ``--trainer.logger CSVLogger`` would find two classes of that name in a process
    that imported trainmesh.fabric (jsonargparse: "Multiple subclasses with name CSVLogger"). The
    files are the writer's (``_CSVWriter``), which this class hands every call to.

    >>> logger = CSVLogger(root_dir="logs")  # doctest: +SKIP
    >>> logger.log_metrics({"loss": 0.25}, step=0)  # doctest: +SKIP
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        # the Trainer's CSV writer's first argument is its save_dir: Fabric's root_dir
        self._writer = _CSVWriter(
            root_dir, name=name, version=version, prefix=prefix, flush_logs_every_n_steps=flush_logs_every_n_steps
        )

    @property
    def name(self) -> str:
        return self._writer.name

    @property
    def version(self) -> int | str:
        return self._writer.version

    @property
    def root_dir(self) -> str:
        return self._writer.root_dir

    @property
    def log_dir(self) -> str:
        return self._writer.log_dir

    @property
    def experiment(self) -> Any:
        """The writer (Fabric's ``_ExperimentWriter``): its ``metrics``, ``metrics_file_path``, ``log_metrics``."""
        return self._writer.experiment

    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        self._writer.log_hyperparams(params)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._writer.log_metrics(metrics, step)

    def save(self) -> None:
        self._writer.save()

    def finalize(self, status: str) -> None:
        self._writer.finalize(status)


# Fabric's TensorBoard logger is defined beside the Trainer's (Lightning's module imports it from there)
TensorBoardLogger = FabricTensorBoardLogger


# Fabric's base of loggers (``lightning.fabric.loggers.Logger``), under the Trainer's as in Lightning
Logger = FabricLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
