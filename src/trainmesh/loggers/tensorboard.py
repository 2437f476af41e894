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
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmesh.launchers.agent_versions import claim_version
from trainmesh.loggers.base import DummyExperiment, Logger, on_rank_zero
from trainmesh.loggers.csv_logger import (
    HPARAMS_FILE,
    hparams_to_dict,
    metric_to_float,
    next_version,
    save_hparams_yaml,
    version_dir_name,
)
from trainmesh.utilities.filesystem import local_path
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


def _flat_for_tensorboard(params: Mapping[Any, Any], parent: str = "") -> dict[str, Any]:
    """Nested hyperparameters as ``a/b`` names, values TensorBoard takes (others as text), as
    Lightning's ``_flatten_dict`` + its TensorBoard logger's ``_sanitize_params``: data classes and
    namespaces opened, a list of mappings as ``name/0/key``; a tensor or array of more than one
    dimension as text (TensorBoard takes a number, or a 1-d tensor's first element)."""
    import dataclasses

    import torch  # here: this module is imported without torch (see the module's docstring)

    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping):
            flat.update(_flat_for_tensorboard(value, name))
            continue
        if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            for index, item in enumerate(value):
                flat.update(_flat_for_tensorboard(item, f"{name}/{index}"))
            continue
        if isinstance(value, torch.Tensor) and value.ndim == 0:
            # Lightning passes a 0-dim tensor on to TensorBoard's ``hparams``, which indexes it and
            # raises: the same error (a program that runs under Lightning runs here, and no other).
            raise IndexError(
                "too many indices for array: array is 0-dimensional, but 1 were indexed (hyperparameter "
                f"{name!r} is a 0-dim tensor, which TensorBoard's hparams cannot take, as under Lightning: "
                "save it as a number (tensor.item()) or a 1-element tensor)"
            )
        if _is_numpy_number(value):  # np.float32(1.5): its number, as Lightning's _sanitize_params
            value = value.item()
        if type(value) not in (bool, int, float, str, torch.Tensor) or getattr(value, "ndim", 0) > 1:
            value = str(value)
        flat[name] = value
    return flat


def _is_numpy_number(value: Any) -> bool:
    """A numpy bool, integer or float scalar (Lightning logs its ``item()``; a 0-dim array is text)."""
    numpy = sys.modules.get("numpy")  # not imported: the value is no numpy object
    return numpy is not None and isinstance(value, (numpy.bool_, numpy.integer, numpy.floating))


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
    """Write TensorBoard event files to ``save_dir/name/version_N[/sub_dir]``, as Lightning's
    (``name`` defaults to ``lightning_logs``; ``None`` or ``""`` leaves that folder out).

    Hyperparameters go to TensorBoard's HPARAMS tab with Lightning's ``hp_metric`` (-1 until you
    log it yourself, unless ``default_hp_metric=False``) and to ``hparams.yaml`` next to the
    events. The event writer, and with it the folder, is created on the first write.

    Args:
        save_dir: the folder the runs go under.
        name: the run's folder name (default ``"lightning_logs"``).
        version: the version folder (``version_N``: the next free N; a string is used as is).
        log_graph: write the model's graph at the start of fit, traced with
            ``model.example_input_array`` (as Lightning's).
        default_hp_metric: with the hyperparameters, log ``hp_metric = -1`` (as Lightning's).
        prefix: put ``"{prefix}-"`` before every metric's name.
        sub_dir: a folder inside the version folder for the event files.
        writer_kwargs: passed on to ``SummaryWriter`` (``flush_secs``, ``max_queue``...).

    Examples:
        >>> logger = TensorBoardLogger("trainmesh_runs")  # doctest: +SKIP
        >>> logger.log_metrics({"train/loss": 0.25}, step=10)  # doctest: +SKIP
    """

    NAME_HPARAMS_FILE = HPARAMS_FILE  # Lightning's: the hyperparameters' file in log_dir (a subclass may rename it)

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike | None = None,
        **writer_kwargs: Any,
    ) -> None:
        # Fail here, when the user builds the Trainer, not hours later at the first log call.
        self._writer_module = _writer_module()
        # kept as given, as Lightning keeps it (os.fspath): "./logs/" stays "./logs/" in every path made from it
        self._save_dir = os.fspath(local_path(save_dir, f"{type(self).__name__}(save_dir)"))  # type: ignore[arg-type]
        self._name = name or ""
        self._version = version
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._writer_kwargs = writer_kwargs
        self._writer: SummaryWriter | None = None
        self._hparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``save_dir/name``: the folder of this run's versions (``name`` and ``save_dir`` read through
        their properties, as Lightning's, so a subclass overriding them moves the folder)."""
        return os.path.join(self.save_dir, self.name)

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    def version(self) -> int | str:
        if self._version is None:  # resolved once, so all files of this run share a folder
            self._version = claim_version(self.root_dir, next_version)
        return self._version

    @property
    def log_dir(self) -> str:
        path = os.path.join(self.root_dir, version_dir_name(self.version))
        if self._sub_dir is not None:
            path = os.path.join(path, self._sub_dir)
        return os.path.expanduser(os.path.expandvars(path))

    @property
    def experiment(self) -> SummaryWriter | DummyExperiment:
        """The underlying ``SummaryWriter``, for images, histograms and the like.

        On ranks other than global rank 0 a :class:`DummyExperiment` that ignores every call.

        >>> # self.logger.experiment.add_image("samples", grid, self.global_step)
        """
        if not on_rank_zero():
            return DummyExperiment()
        if self._writer is None:
            # Named imports, not importlib: jsonargparse (LightningCLI) follows **writer_kwargs into
            # SummaryWriter's signature, so --trainer.logger.flush_secs parses as under Lightning.
            if self._writer_module == "tensorboardX":
                from tensorboardX import SummaryWriter  # type: ignore[import-not-found, no-redef, unused-ignore]
            else:
                from torch.utils.tensorboard import SummaryWriter
            self._writer = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
        return self._writer

    def log_hyperparams(
        self,
        params: Mapping[str, Any] | argparse.Namespace,
        metrics: Mapping[str, Any] | float | None = None,
        step: int | None = None,
    ) -> None:
        """Record ``params`` in TensorBoard's HPARAMS tab (flattened: ``{"a": {"b": 1}}`` is
        ``a/b``) with ``metrics`` (default ``{"hp_metric": -1}``), and for ``log_dir/hparams.yaml``, which
        :meth:`save` writes where it is not yet there (as Lightning's: a later call leaves it as it is)."""
        if not on_rank_zero():  # a Module's own call runs on every rank; rank 0 writes
            return
        params = hparams_to_dict(params)
        self._hparams.update(params)  # hparams.yaml written by save(), once (Lightning's)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else None
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:
            return
        self.log_metrics(metrics, step if step is not None else 0)
        summary = importlib.import_module(self._writer_module + ".summary")
        writer = self.experiment._get_file_writer()
        for part in summary.hparams(_flat_for_tensorboard(params), dict(metrics)):
            writer.add_summary(part, step)

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """With ``log_graph=True``: the model's graph, traced with ``input_array`` or
        ``model.example_input_array`` (the Trainer calls it at the start of fit, as Lightning's)."""
        if not self._log_graph or not on_rank_zero():
            return
        import torch

        input_array = getattr(model, "example_input_array", None) if input_array is None else input_array
        if input_array is None:  # Lightning's words
            warnings.warn(
                "Could not log computational graph to TensorBoard: The `model.example_input_array` attribute"
                " is not set or `input_array` was not given.",
                stacklevel=2,
            )
            return
        if not isinstance(input_array, (torch.Tensor, tuple)):
            warnings.warn(
                "Could not log computational graph to TensorBoard: The `input_array` or `model.example_input_array`"
                f" has type {type(input_array)} which can't be traced by TensorBoard. Make the input array a tuple"
                " representing the positional arguments to the model's `forward()` implementation.",
                stacklevel=2,
            )
            return
        # As Lightning's: the example goes through the batch-transfer hooks to the model's device
        # (a hook may turn uint8 images into floats; a model on the GPU needs its input there).
        if callable(getattr(model, "_apply_batch_transfer_handler", None)):
            input_array = model._apply_batch_transfer_handler(model._on_before_batch_transfer(input_array))
        self.experiment.add_graph(model, input_array)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not on_rank_zero():  # the Trainer calls it on every rank, as Lightning's (rank_zero_only there)
            return
        writer = self.experiment
        at = None if step is None else int(step)  # None: the writer's own default, as Lightning passes it
        for key, value in metrics.items():
            name = f"{self._prefix}-{key}" if self._prefix else key
            if isinstance(value, Mapping):  # a 1.x nested metric: 1.9.5's TensorBoardLogger writes it with add_scalars
                writer.add_scalars(name, {k: metric_to_float(k, v) for k, v in value.items()}, global_step=at)
            else:
                writer.add_scalar(name, metric_to_float(key, value), global_step=at)

    def save(self) -> None:
        """As Lightning's (the Trainer calls it at the start of each run): the writer flushed, made
        first if there is none (so a run that logs nothing still leaves its event file), and
        ``hparams.yaml`` written where the folder exists and the file does not (``{}``: none saved)."""
        if not on_rank_zero():
            return
        self.experiment.flush()
        self._save_hparams_file()

    def _save_hparams_file(self) -> None:
        if os.path.isdir(self.log_dir) and not os.path.isfile(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)):
            save_hparams_yaml(self.log_dir, self._hparams, file_name=self.NAME_HPARAMS_FILE)

    def finalize(self, status: str) -> None:
        if not on_rank_zero():  # the Trainer calls it on every rank, as Lightning's (rank_zero_only there)
            return
        if self._writer is not None:
            # Closed but kept, as Lightning keeps its experiment: the next run's start (save(), the
            # experiment read at setup) makes no new file; a later log call (trainer.test after fit
            # logging a metric) opens a fresh event file, torch's SummaryWriter reopening on use.
            self._writer.flush()
            self._writer.close()
        if status == "success":
            self.save()  # Lightning's finalize saves: hparams.yaml even when none was logged

    def __getstate__(self) -> dict[str, Any]:
        # A SummaryWriter holds a thread and an open file: spawn launchers pickle loggers, so
        # send the configuration and let the receiving process open its own writer.
        state = self.__dict__.copy()
        state["_writer"] = None
        return state


class FabricTensorBoardLogger(TensorBoardLogger):
    """Lightning Fabric's TensorBoard logger (``lightning.fabric.loggers.TensorBoardLogger``, which Lightning's
    module imports under this name; ``trainmesh.fabric.loggers`` names it): the first argument is ``root_dir``,
    the folder that holds ``name/version_N``, and there is no ``log_graph`` argument."""

    def __init__(
        self,
        root_dir: str | os.PathLike,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            root_dir,
            name=name,
            version=version,
            default_hp_metric=default_hp_metric,
            prefix=prefix,
            sub_dir=sub_dir,
            **kwargs,
        )

    def _save_hparams_file(self) -> None:
        """Fabric's logger writes no ``hparams.yaml`` (its hyperparameters go to the event file only)."""
