"""``DeviceStatsMonitor``, as Lightning 2.6 defines it (its ``callbacks/device_stats_monitor.py``): at
each training, validation and test batch's start and end where the loggers are due
(``log_every_n_steps``), the device's statistics sent to the loggers as
``DeviceStatsMonitor.{hook}/{stat}``: on CPU, ``psutil``'s ``cpu_percent``, ``cpu_vm_percent`` and
``cpu_swap_percent`` (``cpu_stats=None``: only on CPU; ``True``: on any device, beside CUDA's
``torch.cuda.memory_stats``; ``False``: never CPU's). It needs a logger, and on CPU ``psutil``
(as Lightning: a ``ModuleNotFoundError`` when it is missing).

>>> monitor = DeviceStatsMonitor(cpu_stats=False)
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.device_stats import PSUTIL_MISSING, _psutil_available, get_cpu_stats
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue


def get_device_stats(device: torch.device) -> dict[str, Any]:
    """What Lightning's accelerator for ``device`` reports: CUDA's allocator statistics, MPS's
    ``M1_*`` host figures, or CPU's."""
    if device.type == "cuda":
        return dict(torch.cuda.memory_stats(device))
    if device.type == "mps":
        from trainmesh.accelerators.mps import get_device_stats as mps_stats

        return mps_stats()
    return get_cpu_stats()


class DeviceStatsMonitor(Callback):
    """Log the device's statistics during training, validation and test: at each batch's start and
    end where the loggers are due (``log_every_n_steps``), under ``DeviceStatsMonitor.{hook}/{stat}``
    (CUDA: ``torch.cuda.memory_stats``; CPU: ``psutil``'s ``cpu_percent``, ``cpu_vm_percent``,
    ``cpu_swap_percent``; MPS: the host's, as ``M1_*``). Needs a logger: ``Trainer(logger=False)`` raises
    Lightning's ``MisconfigurationException`` (also a ``ValueError``) at fit.

    Args:
        cpu_stats: ``None``: CPU statistics only when training on CPU (needs ``psutil``); ``True``: also beside CUDA's statistics on a GPU; ``False``: never CPU's (on CPU nothing is logged) (default ``None``).

    Examples:
        >>> monitor = DeviceStatsMonitor(cpu_stats=False)
        >>> # Trainer(accelerator="cuda", callbacks=[monitor]): CUDA memory statistics in the logs
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats
        self._stepped = 0  # Lightning's ``_batches_that_stepped`` when the current training batch started

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfiguredValue("Cannot use `DeviceStatsMonitor` callback with `Trainer(logger=False)`.")
        if self._cpu_stats is None and pl_module.device.type == "cpu" and not _psutil_available():
            raise ModuleNotFoundError(
                f"`DeviceStatsMonitor` cannot log CPU stats as `psutil` is not installed. {PSUTIL_MISSING} "
            )

    def _log(self, trainer: TrainerView, pl_module: Any, key: str, count: int, step: int) -> None:
        """Log where the loggers are due: ``count`` is the loop's batch count (from 1) Lightning checks."""
        due = trainer.log_every_n_steps != 0 and (count % trainer.log_every_n_steps == 0 or trainer.should_stop)
        device = pl_module.device
        if not due or (self._cpu_stats is False and device.type == "cpu"):
            return
        stats = get_device_stats(device)
        if self._cpu_stats and device.type != "cpu":
            stats.update(get_cpu_stats())
        for logger in trainer.loggers:
            separator = getattr(logger, "group_separator", "/")
            prefix = f"{type(self).__qualname__}.{key}{separator}"
            logger.log_metrics({prefix + name: value for name, value in stats.items()}, step=step)

    def on_train_batch_start(self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._stepped = trainer.global_step  # one optimizer: the batches that stepped before this one
        self._log(trainer, pl_module, "on_train_batch_start", self._stepped + 1, self._stepped)

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._log(trainer, pl_module, "on_train_batch_end", self._stepped + 1, self._stepped)

    def _eval(self, trainer: TrainerView, pl_module: Any, key: str, batch_idx: int) -> None:
        # Lightning logs at its training count: inside fit the batch's that validates, else the fit's total
        step = self._stepped if trainer.stage == "fit" else trainer.global_step
        self._log(trainer, pl_module, key, batch_idx + 1, step)

    def on_validation_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval(trainer, pl_module, "on_validation_batch_start", batch_idx)

    def on_validation_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval(trainer, pl_module, "on_validation_batch_end", batch_idx)

    def on_test_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval(trainer, pl_module, "on_test_batch_start", batch_idx)

    def on_test_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval(trainer, pl_module, "on_test_batch_end", batch_idx)
