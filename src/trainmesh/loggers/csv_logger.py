"""Log metrics to a CSV file and hyperparameters to a YAML file, with no extra dependency.

The helpers at the top (version numbering, metric conversion, ``hparams.yaml``) are shared
with :mod:`trainmesh.loggers.tensorboard`, so both loggers lay out their folders the same way.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import re
import warnings
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from trainmesh.launchers.agent_versions import claim_version, taken_from_agent
from trainmesh.loggers.base import DummyExperiment, Logger, on_rank_zero
from trainmesh.utilities.filesystem import local_path

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"

_VERSION_DIR = re.compile(r"^version_(\d+)$")


def next_version(root: str | os.PathLike) -> int:
    """The next free ``version_N`` number under ``root`` (0 when there is none yet).

    >>> next_version("/nonexistent/trainmesh")
    0
    """
    root = Path(root)
    if not root.is_dir():
        return 0
    taken = [int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _VERSION_DIR.match(p.name))]
    # max + 1 rather than the smallest gap: a deleted version_1 must not make the next run
    # sort between older and newer runs.
    return max(taken) + 1 if taken else 0


def version_dir_name(version: int | str) -> str:
    """``version_3`` for an integer, the string itself for a named version."""
    return version if isinstance(version, str) else f"version_{version}"


def metric_to_float(key: str, value: Any) -> float:
    """Convert a logged value (Python number, NumPy scalar, one-element tensor) to a float.

    >>> metric_to_float("loss", torch.tensor(0.5))
    0.5
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metric {key!r} is a tensor of shape {tuple(value.shape)}; a logger stores one "
                "number per metric and step. Reduce it first, e.g. log `value.mean()`."
            )
        # .item() synchronizes with the device; it runs once per log call, not per batch.
        return float(value.detach().item())
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"metric {key!r} has value {value!r} of type {type(value).__name__}, which is not a "
            "number; loggers store numbers only. Log a float, int or one-element tensor."
        ) from err


def yaml_values(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters ``hparams.yaml`` holds, by Lightning's rule (``save_hparams_to_yaml``):
    each value as PyYAML's ``yaml.dump`` writes it (an ``Enum`` by its name; a tuple, a class or
    an object with its Python tag, so a file written under either framework reads the same), and
    a value ``yaml.dump`` refuses left out with Lightning's warning.

    >>> yaml_values({"lr": 0.1, "kind": Enum("Kind", "SGD").SGD})
    {'lr': 0.1, 'kind': 'SGD'}
    """
    import yaml  # pyyaml is a dependency, but only loggers need it: keep `import trainmesh` lean

    kept = {}
    for key, value in hparams.items():
        try:
            value = value.name if isinstance(value, Enum) else value
            yaml.dump(value)
        except (TypeError, ValueError):
            warnings.warn(
                f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.", stacklevel=2
            )
        else:
            kept[key] = value
    return kept


def hparams_to_dict(params: Mapping[str, Any] | argparse.Namespace) -> dict[str, Any]:
    """Accept the two shapes users pass hyperparameters in: a mapping or an argparse result."""
    if isinstance(params, argparse.Namespace):
        return vars(params).copy()
    if not isinstance(params, Mapping):
        raise TypeError(
            f"log_hyperparams got a {type(params).__name__}; it takes a dict (or argparse "
            "Namespace) of names to values. Pass e.g. `{'lr': 0.01}`."
        )
    return dict(params)


def save_hparams_yaml(log_dir: str | os.PathLike, hparams: Mapping[str, Any], *, file_name: str = HPARAMS_FILE) -> Path:
    """Write ``hparams`` to ``log_dir/hparams.yaml`` (or ``file_name``), creating ``log_dir``; return the path."""
    path = Path(log_dir) / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(path, hparams_yaml_text(hparams))
    return path


def hparams_yaml_text(hparams: Mapping[str, Any], *, use_omegaconf: bool = True) -> str:
    """The text Lightning's ``save_hparams_to_yaml`` writes for ``hparams``: ``OmegaConf.save``'s
    where omegaconf is installed and takes every value, else PyYAML's (see :func:`yaml_values`).

    >>> hparams_yaml_text({"lr": 0.1})
    'lr: 0.1\n'
    """
    import yaml  # pyyaml is a dependency, but only loggers need it: keep `import trainmesh` lean

    text = _omegaconf_text(hparams) if use_omegaconf else None
    if text is None:  # keys sorted, as Lightning's yaml.dump writes them (a file written under either reads the same)
        text = yaml.dump(yaml_values(hparams), sort_keys=True)
    return text


def _omegaconf_text(hparams: Mapping[str, Any]) -> str | None:
    """The file as Lightning's ``save_hparams_to_yaml`` writes it where omegaconf is installed:
    ``OmegaConf.save`` (keys in their order, DictConfig values resolved, interpolation strings kept);
    None where omegaconf is absent or refuses a value (then Lightning falls back to ``yaml.dump``)."""
    if importlib.util.find_spec("omegaconf") is None:
        return None
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import UnsupportedValueType, ValidationError

    def resolved(value: Any) -> Any:  # Lightning's apply_to_collection(hparams, DictConfig, to_container)
        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
        if isinstance(value, (dict, list, tuple)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            done = {key: resolved(item) for key, item in items}
            return done if isinstance(value, dict) else type(value)(done.values())
        return value

    try:
        return OmegaConf.to_yaml(OmegaConf.create(resolved(dict(hparams))))
    except (UnsupportedValueType, ValidationError):
        return None


def _atomic_write_text(path: Path, text: str) -> None:
    # Write then rename, so that a crash mid-write never leaves a truncated file behind.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class CSVLogger(Logger):
    """Write metrics to ``save_dir/name/version_N/metrics.csv`` and hparams to ``hparams.yaml``
    (``name`` as Lightning's: ``lightning_logs``).

    Rows are buffered and written every ``flush_logs_every_n_steps`` calls to :meth:`log_metrics`
    and on :meth:`save` / :meth:`finalize`. The header is the union of all metric names seen
    plus ``step``; when a new name appears the file is rewritten with the wider header, and
    rows that lack a column leave it empty. Nothing is created on disk before the first write.

    >>> logger = CSVLogger("trainmesh_runs")
    >>> logger.log_metrics({"loss": 0.25}, step=10)
    >>> logger.finalize("success")  # doctest: +SKIP
    """

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if flush_logs_every_n_steps < 1:
            raise ValueError(
                f"flush_logs_every_n_steps={flush_logs_every_n_steps} must be at least 1: it is the number "
                "of log calls between writes to metrics.csv. Use 1 to write on every call."
            )
        # kept as given, as Lightning keeps it (os.fspath): "./logs/" stays "./logs/" in every path made from it
        self._save_dir = os.fspath(local_path(save_dir, f"{type(self).__name__}(save_dir)"))  # type: ignore[arg-type]
        self._name = name or ""  # None as "": the versions directly under save_dir, as Lightning's
        self._version = version
        self._flush_every_n_steps = flush_logs_every_n_steps
        self._prefix = prefix
        self._hparams: dict[str, Any] = {}
        self._buffer: list[dict[str, float | int]] = []
        self._columns: list[str] | None = None  # the header of metrics.csv; None: not read yet
        self._calls_since_flush = 0
        self._log_dir_checked = False  # Lightning's check of an existing folder, once (its writer's creation)
        self._sorted_header = True  # Lightning 2's header; 1.9.5's keeps the names' first-appearance order
        self._lightning1 = False  # a pytorch-lightning 1.x run's (the Trainer tells it at each stage's start)
        self._written = False  # 1.9.5's writer made: something was logged or saved (not just finalized)

    def _follow_module_generation(self, lightning1: bool) -> None:
        """The header order of the run's module generation (the Trainer tells it at each stage's start):
        pytorch-lightning 1.9.5's CSVLogger writes the names in the order they first appear (its save
        gathers them with ``dict.update``), Lightning 2's sorts them; 1.9.5's rewrites ``hparams.yaml`` at
        every save (:meth:`save`)."""
        self._sorted_header, self._lightning1 = not lightning1, lightning1

    @property
    def name(self) -> str:
        return self._name

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def version(self) -> int | str:
        # Resolved once, on first use, so that every file of this run lands in one folder even
        # if another run claims the next number meanwhile.
        if self._version is None:
            self._version = claim_version(self.root_dir, next_version)
        return self._version

    @property
    def root_dir(self) -> str:
        """``save_dir/name``, as Lightning's: read through the properties, which a subclass may override."""
        return os.path.join(self.save_dir, self.name)

    @property
    def log_dir(self) -> str:
        return os.path.join(self.root_dir, version_dir_name(self.version))

    @property
    def metrics_file(self) -> str:
        return os.path.join(self.log_dir, METRICS_FILE)

    # Lightning's ``experiment`` is its ExperimentWriter; trainmesh's is this logger, so the writer's
    # public names are here too (a subclass's ``save()`` reading ``self.experiment.metrics_file_path``).
    NAME_METRICS_FILE = METRICS_FILE
    NAME_HPARAMS_FILE = HPARAMS_FILE

    @property
    def metrics_file_path(self) -> str:
        """The writer's ``metrics.csv`` path (Lightning's ``experiment.metrics_file_path``)."""
        return self.metrics_file

    @property
    def metrics(self) -> list[dict[str, float | int]]:
        """The rows logged since the last write, each with its ``step`` (the writer's ``metrics``)."""
        return self._buffer

    @property
    def hparams(self) -> dict[str, Any]:
        """The hyperparameters logged so far (the writer's ``hparams``)."""
        return self._hparams

    def log_hparams(self, params: dict[str, Any]) -> None:
        """The writer's ``log_hparams``: merge ``params`` and rewrite ``hparams.yaml``."""
        self.log_hyperparams(params)

    @property
    def experiment(self) -> CSVLogger | DummyExperiment:
        """This logger itself (it writes its files directly), or on ranks other than global rank 0
        a :class:`DummyExperiment` that ignores every call, so a Module's
        ``self.logger.experiment.log_metrics(...)`` writes once."""
        if not on_rank_zero():
            return DummyExperiment()
        self._check_log_dir()
        return self

    def keep_this_run_s_file(self) -> None:
        """This version's ``metrics.csv`` holds this run's rows (spawned workers wrote them in an
        earlier stage): the next stage appends to it instead of deleting it as an earlier run's, as
        one process's logger, whose writer is made once, would."""
        self._log_dir_checked = True

    def _check_log_dir(self) -> None:
        """Lightning's ExperimentWriter as it is created (the logger's first use): a folder of this version
        that already holds files is warned of, and its ``metrics.csv`` deleted, so this run's rows are the
        file's only ones (Lightning's words; ``hparams.yaml`` is rewritten by the next hyperparameters)."""
        if self._log_dir_checked:
            return
        self._log_dir_checked = True
        log_dir = Path(self.log_dir)
        if taken_from_agent(self.root_dir, self.version):
            return  # written by this run's first process before fit: Lightning's rank 0 is that process
        if log_dir.is_dir() and any(log_dir.iterdir()):
            warnings.warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty."
                " Previous log files in this directory will be deleted when the new ones are saved!",
                stacklevel=3,
            )
            Path(self.metrics_file).unlink(missing_ok=True)

    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace | None = None) -> None:
        """Merge ``params`` (None: none, as Lightning's) into the saved hyperparameters and rewrite
        ``hparams.yaml``.

        Only global rank 0 writes: a Module's own call runs on every rank.
        """
        if not on_rank_zero():
            return
        self._check_log_dir()
        self._written = True
        self._hparams.update(hparams_to_dict({} if params is None else params))
        save_hparams_yaml(self.log_dir, self._hparams)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Buffer one row: every metric of ``metrics`` at ``step`` (None: as Lightning's CSVLogger,
        the count of rows buffered since the last flush). Global rank 0 only, as Lightning's
        (the Trainer calls it on every rank, as a Module's own call runs)."""
        if not on_rank_zero():
            return
        # An int stays one ("epoch": 0 is written 0, as Lightning's CSVLogger writes it)
        row: dict[str, Any] = {
            (f"{self._prefix}-{key}" if self._prefix else key): value
            if type(value) is int
            else {k: metric_to_float(k, v) for k, v in value.items()}  # a 1.x nested metric: its dict, as 1.9.5's cell
            if isinstance(value, Mapping)
            else metric_to_float(key, value)
            for key, value in metrics.items()
        }
        row["step"] = len(self._buffer) if step is None else int(step)
        self._check_log_dir()
        self._written = True
        self._buffer.append(row)
        self._calls_since_flush += 1
        if self._calls_since_flush >= self._flush_every_n_steps:
            self.save()

    def save(self) -> None:
        """Write the buffered rows to ``metrics.csv`` (global rank 0 only, as Lightning's); in a 1.x run
        ``hparams.yaml`` first, as 1.9.5's writer saves it every time (``{}`` for a module without any)."""
        if not on_rank_zero():
            return
        self._calls_since_flush = 0
        if self._lightning1:
            self._check_log_dir()
            self._written = True
            save_hparams_yaml(self.log_dir, self._hparams)
        if not self._buffer:
            return
        path = Path(self.metrics_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._columns is None:
            self._check_log_dir()  # a file of an earlier run in this version is gone (Lightning's)
            self._columns = _read_header(path)
        columns = list(self._columns)
        for row in self._buffer:
            columns.extend(key for key in row if key not in columns)
        if len(columns) > len(self._columns) and self._sorted_header:  # new names: Lightning 2 sorts the header again
            columns.sort()
        if columns != self._columns or not path.exists():
            _rewrite_with_header(path, columns, self._buffer)
        else:
            with path.open("a", newline="", encoding="utf-8") as file:
                csv.DictWriter(file, fieldnames=columns, restval="").writerows(self._buffer)
        self._columns = columns
        self._buffer = []

    def finalize(self, status: str) -> None:
        if self._lightning1 and not self._written:  # 1.9.5's: no writer made (a tune that logged nothing), no file
            return
        self.save()


def _read_header(path: Path) -> list[str]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as file:
        return next(csv.reader(file), [])


def _rewrite_with_header(path: Path, columns: list[str], new_rows: list[dict[str, float | int]]) -> None:
    old_rows: list[dict[str, str]] = []
    if path.exists():
        with path.open(newline="", encoding="utf-8") as file:
            old_rows = list(csv.DictReader(file))
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(old_rows)
        writer.writerows(new_rows)
    os.replace(tmp, path)
