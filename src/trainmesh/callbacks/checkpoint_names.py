"""Checkpoint file names, ModelCheckpoint's argument checks and the rules it reads from the Trainer's
settings: the parts of ``model_checkpoint.py`` that keep no state, kept apart so that the callback's
file holds its cadence and its ranking."""

from __future__ import annotations

import math
import os
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.rank_zero import rank_zero_warn

# The "{name" that opens each field (Lightning's own pattern): "{epoch}", "{val/loss:.2f}".
_GROUP = re.compile(r"(\{.*?)[:\}]")
_MODES = ("min", "max")


def render_filename(
    template: str | None,
    values: dict[str, Any],
    *,
    auto_insert_metric_name: bool = True,
    prefix: str | None = None,
    join: str = "-",
    equals: str = "=",
) -> str:
    """Fill ``{name}`` / ``{name:spec}`` fields of a checkpoint filename template, as Lightning 2.6's
    ``ModelCheckpoint._format_checkpoint_name`` does.

    ``auto_insert_metric_name`` writes ``name=`` before every field (also after a ``name=`` the
    template already holds: ``"loss={loss}"`` gives ``loss=loss=...``); a name with ``/`` stays in the
    name (``val/loss=0.12``: a sub-folder, as in Lightning); a name not in ``values`` renders as 0.
    An empty or None template is ``"{epoch}-{step}"``; ``join`` and ``equals`` are the class's
    ``CHECKPOINT_JOIN_CHAR`` and ``CHECKPOINT_EQUALS_CHAR``.

    >>> render_filename("{epoch}-{val/loss:.2f}", {"epoch": 2, "val/loss": 0.1234})
    'epoch=2-val/loss=0.12'
    """
    filename = template or "{epoch}" + join + "{step}"
    metrics = dict(values)
    # Longest first, so that "{epoch_loss" is replaced before "{epoch" (Lightning's order).
    for group in sorted(_GROUP.findall(filename), key=len, reverse=True):
        name = group[1:]
        if auto_insert_metric_name:
            filename = filename.replace(group, name + equals + "{" + name)
        filename = filename.replace(group, f"{{0[{name}]")
        metrics.setdefault(name, torch.tensor(0))
    try:
        filename = filename.format(metrics)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"checkpoint filename {template!r}: cannot format the values {metrics} ({exc}); metrics are "
            "floats (use e.g. :.3f) and epoch/step are ints (e.g. :03d)"
        ) from None
    return filename if prefix is None else f"{prefix}{join}{filename}"


def default_checkpoint_dir(trainer: TrainerView) -> str:
    """Where a ModelCheckpoint without ``dirpath`` saves, by Lightning's ``__resolve_ckpt_dir``: the
    first logger's ``save_dir`` (``default_root_dir`` where None), name and version, then
    ``checkpoints`` (not its ``log_dir``: a TensorBoardLogger's ``sub_dir`` is left out); with no
    logger, ``default_root_dir/checkpoints``."""
    if not trainer.loggers:
        return os.path.join(trainer.default_root_dir, "checkpoints")
    logger = trainer.loggers[0]
    save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return os.path.join(save_dir, str(logger.name), version, "checkpoints")


def monitor_candidates(trainer: TrainerView) -> dict[str, Any]:
    """What ModelCheckpoint ranks and names by, as Lightning's ``_monitor_candidates``: a copy of
    ``callback_metrics`` with ``epoch`` and ``step`` (a logged one cast to int, else the Trainer's)."""
    candidates = {
        name: value.detach().clone() if isinstance(value, torch.Tensor) else value
        for name, value in trainer.callback_metrics.items()
    }
    for name, own in (("epoch", trainer.current_epoch), ("step", trainer.global_step)):
        logged = candidates.get(name)
        candidates[name] = logged.int() if isinstance(logged, torch.Tensor) else torch.tensor(own)
    return candidates


def check_arguments(
    monitor: str | None,
    mode: str,
    save_top_k: int,
    every_n_train_steps: int | None,
    every_n_epochs: int | None,
    train_time_interval: timedelta | None = None,
) -> None:
    """ModelCheckpoint's arguments, refused where Lightning refuses them (with what to use), as its
    ``MisconfigurationException`` (a ``ValueError`` too, as trainmesh raised before)."""
    if mode not in _MODES:
        raise MisconfiguredValue(
            f"ModelCheckpoint(mode={mode!r}): use 'min' (lower is better, e.g. a loss) or 'max' (e.g. accuracy)"
        )
    if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
        raise MisconfiguredValue(
            f"ModelCheckpoint(save_top_k={save_top_k!r}): use -1 (keep all), 0 (none) or a count >= 1"
        )
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise MisconfiguredValue(
                f"ModelCheckpoint({name}={value!r}) must be an integer >= 0 (0 turns that cadence off)"
            )
    if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
        raise MisconfiguredValue(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}): use a datetime.timedelta"
        )
    cadences = bool(every_n_train_steps) + bool(every_n_epochs) + (train_time_interval is not None)
    if cadences > 1:
        raise MisconfiguredValue(
            f"ModelCheckpoint: Combination of parameters every_n_train_steps={every_n_train_steps}, "
            f"every_n_epochs={every_n_epochs} and train_time_interval={train_time_interval} should be mutually "
            "exclusive (as in Lightning); use one ModelCheckpoint per cadence"
        )
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise MisconfiguredValue(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): without a monitored metric there is no "
            "ranking to pick the top k by; set monitor='val_loss' (say), or save_top_k=-1 to keep every checkpoint"
        )


def worst(mode: str) -> float:
    return math.inf if mode == "min" else -math.inf


def as_score(value: float | torch.Tensor) -> torch.Tensor:
    """A score as Lightning keeps it: the logged tensor itself (its dtype and device), a number as a
    tensor of the default dtype (as ``torch.tensor(torch.inf)``, Lightning's starting k-th value)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()  # Lightning ranks a deep copy of the metrics
    return torch.tensor(float(value))


def absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def inside(path: str, directory: str | None) -> bool:
    # Only files under our own folder are ever deleted, whatever a restored state says.
    return directory is not None and Path(absolute(path)).is_relative_to(absolute(directory))


def link_or_copy(target: str, path: str) -> None:
    """``save_last="link"``: make ``path`` a relative symbolic link to ``target`` (a copy where links
    cannot be made, as on Windows without the right), replacing what is there, as Lightning's."""
    if absolute(target) == absolute(path):
        return
    if os.path.islink(path) or os.path.isfile(path):
        os.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    try:
        os.symlink(os.path.relpath(target, os.path.dirname(path)), path)
    except OSError:
        if os.path.isdir(target):
            shutil.copytree(target, path)
        else:
            shutil.copy(target, path)


def write_yaml(scores: dict[str, float], dirpath: str | None, filepath: str | os.PathLike[str] | None) -> None:
    """``ModelCheckpoint.to_yaml``: ``scores`` (path: score) to ``filepath``, by default
    ``<dirpath>/best_k_models.yaml``."""
    import yaml

    if filepath is None:
        if not dirpath:
            raise ValueError("ModelCheckpoint.to_yaml() needs a filepath before fit sets dirpath; pass one")
        filepath = os.path.join(dirpath, "best_k_models.yaml")
    with open(filepath, "w", encoding="utf-8") as handle:
        yaml.safe_dump(scores, handle)


def saves_at_epoch_end(setting: bool | None, trainer: TrainerView) -> bool:
    """Lightning's rule where ``save_on_train_epoch_end`` is None: after each validation run when
    validation runs more than once an epoch or not every epoch (the monitored metric may not
    exist at an epoch's end), at the epoch's end when it runs once at the end of each, or not at all."""
    if setting is not None:
        return setting
    if getattr(trainer, "_val_check_time_interval", None) is not None:  # time-based: after validation
        return False
    if getattr(trainer, "check_val_every_n_epoch", 1) != 1:
        return False
    if not getattr(trainer, "val_loader_batches", 0):
        return True
    return getattr(trainer, "val_check_interval", 1.0) in (None, 1.0)


def warn_if_dir_not_empty(dirpath: str | None, save_top_k: int) -> None:
    """Lightning's warning as a fit sets its checkpoint folder up (``ModelCheckpoint.setup``): the
    folder already holds something (a file, a folder, a hidden one) and this callback saves."""
    if save_top_k != 0 and dirpath is not None and os.path.isdir(dirpath) and os.listdir(dirpath):
        rank_zero_warn(f"Checkpoint directory {dirpath} exists and is not empty.")
