"""Log metrics and hyperparameters to TensorBoard event files.

tensorboard is an optional dependency (``tensorboardX`` serves too, as in Lightning). Its import
takes about a second, so it happens at the first write, never when this module is imported or a
:class:`TensorBoardLogger` constructed: ``import trainmesh`` and ``Trainer()`` stay fast and work
without it. Construction only checks that the package is installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmesh.loggers.base import DummyExperiment, Logger, on_rank_zero
from trainmesh.loggers.csv_logger import (
    hparams_to_dict,
    metric_to_float,
    next_version,
    save_hparams_yaml,
    to_yaml_safe,
    version_dir_name,
)
from trainmesh.utilities.install_hints import install_hint

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


# The package that must be installed -> the module whose SummaryWriter writes the events.
_WRITERS = {"tensorboard": "torch.utils.tensorboard", "tensorboardX": "tensorboardX"}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None  # finds it without importing it
    except (ImportError, ValueError):
        return False


def tensorboard_available() -> bool:
    """Whether ``tensorboard`` or ``tensorboardX`` is installed (checked without importing it):
    Lightning's rule for what ``Trainer(logger=True)`` writes with."""
    return any(_installed(package) for package in _WRITERS)


def _writer_module() -> str:
    for package, module in _WRITERS.items():
        if _installed(package):
            return module
    raise ImportError(
        "TensorBoardLogger needs the `tensorboard` package, which is not installed. "
        f"Install it with: `{install_hint('tensorboard')}` (or use CSVLogger, which "
        "needs nothing extra)."
    )


class TensorBoardLogger(Logger):
    """Write TensorBoard event files to ``save_dir/name/version_N`` (``name`` as Lightning's:
    ``lightning_logs``).

    Hyperparameters go to the TEXT tab as YAML (and to ``hparams.yaml`` next to the events).
    The event writer, and with it the folder, is created on the first write.
    Extra keyword arguments (``flush_secs``, ``max_queue``...) go to ``SummaryWriter``.

    >>> logger = TensorBoardLogger("trainmesh_runs")  # doctest: +SKIP
    >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
    """

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str = "lightning_logs",
        version: int | str | None = None,
        **writer_kwargs: Any,
    ) -> None:
        # Fail here, when the user builds the Trainer, not hours later at the first log call.
        self._writer_module = _writer_module()
        self._save_dir = Path(save_dir)
        self._name = name
        self._version = version
        self._writer_kwargs = writer_kwargs
        self._writer: SummaryWriter | None = None
        self._hparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def save_dir(self) -> str:
        return os.fspath(self._save_dir)

    @property
    def version(self) -> int | str:
        if self._version is None:  # resolved once, so all files of this run share a folder
            self._version = next_version(self._save_dir / self._name)
        return self._version

    @property
    def log_dir(self) -> str:
        return os.fspath(self._save_dir / self._name / version_dir_name(self.version))

    @property
    def experiment(self) -> SummaryWriter | DummyExperiment:
        """The underlying ``SummaryWriter``, for images, histograms and the like.

        On ranks other than global rank 0 a :class:`DummyExperiment` that ignores every call.

        >>> # self.logger.experiment.add_image("samples", grid, self.global_step)
        """
        if not on_rank_zero():
            return DummyExperiment()
        if self._writer is None:
            writer_cls = importlib.import_module(self._writer_module).SummaryWriter
            self._writer = writer_cls(log_dir=self.log_dir, **self._writer_kwargs)
        return self._writer

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        """Record ``params`` as YAML text in TensorBoard and in ``log_dir/hparams.yaml``."""
        import yaml

        if not on_rank_zero():  # a Module's own call runs on every rank; rank 0 writes
            return
        self._hparams.update(hparams_to_dict(params))
        text = yaml.safe_dump(to_yaml_safe(self._hparams), sort_keys=False)
        # TensorBoard renders text as Markdown; indenting makes it a code block, so the YAML
        # keeps its line breaks and indentation.
        markdown = "".join(f"    {line}\n" for line in text.splitlines())
        self.experiment.add_text("hparams", markdown)
        save_hparams_yaml(self.log_dir, self._hparams)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        writer = self.experiment
        for key, value in metrics.items():
            writer.add_scalar(key, metric_to_float(key, value), global_step=int(step))

    def save(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            # A later log call (e.g. trainer.test after fit) opens a fresh event file.
            self._writer = None

    def __getstate__(self) -> dict[str, Any]:
        # A SummaryWriter holds a thread and an open file: spawn launchers pickle loggers, so
        # send the configuration and let the receiving process open its own writer.
        state = self.__dict__.copy()
        state["_writer"] = None
        return state
