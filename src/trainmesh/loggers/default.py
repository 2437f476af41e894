"""What ``Trainer(logger=True)``, the default, logs with: Lightning's rule.

A :class:`~trainmesh.loggers.TensorBoardLogger` when ``tensorboard`` (or ``tensorboardX``) is
installed, so that a Lightning program's ``self.logger.experiment.add_image(...)`` works in a
default Trainer; otherwise a :class:`~trainmesh.loggers.CSVLogger`, which needs nothing extra.
Both write to ``<default_root_dir>/lightning_logs/version_N``; in a SLURM batch job the
TensorBoard version is the job's id, so a requeued job keeps writing to the same folder.
Neither imports tensorboard here: that waits for the first write.
"""

from __future__ import annotations

from trainmesh.launchers.environments import slurm_job_id
from trainmesh.loggers.base import Logger
from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.loggers.tensorboard import TensorBoardLogger, tensorboard_available
from trainmesh.utilities.install_hints import install_hint
from trainmesh.utilities.rank_zero import rank_zero_info

_told_about_csv = False  # the fallback is explained once per process, not per Trainer


def default_logger(save_dir: str) -> Logger:
    """The logger ``Trainer(logger=True)`` writes with under ``save_dir`` (its default_root_dir)."""
    global _told_about_csv
    if tensorboard_available():
        return TensorBoardLogger(save_dir, version=slurm_job_id())
    if not _told_about_csv:
        _told_about_csv = True
        rank_zero_info(
            "logger=True: tensorboard is not installed, so metrics go to a CSVLogger "
            f"({save_dir}/lightning_logs/version_N/metrics.csv); `{install_hint('tensorboard')}` to log "
            "to TensorBoard, as Lightning's default does when it is installed"
        )
    return CSVLogger(save_dir)
