"""Lightning's ``lightning.pytorch.core.saving``: the hyperparameter files a logger writes and
``load_from_checkpoint(hparams_file=...)`` reads (``hparams.yaml``, and 1.x's ``tags.csv``).

A program reads a run's hyperparameters back with ``load_hparams_from_yaml(logger.log_dir +
"/hparams.yaml")``; the functions take and return what Lightning's do (a ``DictConfig`` where
omegaconf is installed and takes the values).

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "hparams.yaml")
>>> save_hparams_to_yaml(path, {"lr": 0.1, "layers": [4, 8]})
>>> dict(load_hparams_from_yaml(path, use_omegaconf=False))
{'lr': 0.1, 'layers': [4, 8]}
"""

from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainmesh.hparams_files import convert, load_hparams_from_tags_csv, load_hparams_from_yaml
from trainmesh.loggers.csv_logger import hparams_yaml_text
from trainmesh.utilities.attribute_dict import AttributeDict

__all__ = [
    "convert",
    "load_hparams_from_tags_csv",
    "load_hparams_from_yaml",
    "save_hparams_to_tags_csv",
    "save_hparams_to_yaml",
    "update_hparams",
]


def _as_dict(hparams: Any) -> Any:
    if isinstance(hparams, argparse.Namespace):
        return vars(hparams)
    return dict(hparams) if isinstance(hparams, AttributeDict) else hparams


def _require_folder(path: str | os.PathLike) -> None:
    folder = os.path.dirname(path)
    if not os.path.isdir(folder or "."):
        raise RuntimeError(f"Missing folder: {folder}.")


def save_hparams_to_yaml(config_yaml: str | os.PathLike, hparams: Any, use_omegaconf: bool = True) -> None:
    """Write ``hparams`` (a dict, ``Namespace`` or ``AttributeDict``) to ``config_yaml`` as
    Lightning does (omegaconf's text where it takes every value, else PyYAML's, leaving out with a
    warning a value YAML cannot hold).

    Args:
        config_yaml: the file to write; its folder must exist (``RuntimeError`` otherwise, as Lightning's).
        hparams: the hyperparameters.
        use_omegaconf: write through omegaconf when it is installed.

    Examples:
        >>> import tempfile, os
        >>> save_hparams_to_yaml(os.path.join(tempfile.mkdtemp(), "h.yaml"), {"lr": 0.1})
    """
    _require_folder(config_yaml)
    hparams = _as_dict(hparams)
    if not isinstance(hparams, Mapping):
        raise TypeError("hparams must be dictionary")
    Path(config_yaml).write_text(hparams_yaml_text(hparams, use_omegaconf=use_omegaconf), encoding="utf-8")


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike, hparams: Any) -> None:
    """Write ``hparams`` as Lightning 1.x's ``tags.csv`` (a ``key,value`` row per name).

    Args:
        tags_csv: the file to write; its folder must exist.
        hparams: a dict or ``Namespace``.

    Examples:
        >>> import tempfile, os
        >>> save_hparams_to_tags_csv(os.path.join(tempfile.mkdtemp(), "tags.csv"), {"lr": 0.1})
    """
    _require_folder(tags_csv)
    hparams = _as_dict(hparams)
    with open(tags_csv, "w", newline="") as fp:
        writer = csv.DictWriter(fp, fieldnames=["key", "value"])
        writer.writerow({"key": "key", "value": "value"})
        for key, value in hparams.items():
            writer.writerow({"key": key, "value": value})


def update_hparams(hparams: dict, updates: dict) -> None:
    """Update ``hparams`` in place with ``updates``, merging nested dicts key by key.

    Args:
        hparams: the dict to change.
        updates: the values to put in.

    Examples:
        >>> hp = {"opt": {"lr": 0.1, "m": 0.9}}
        >>> update_hparams(hp, {"opt": {"lr": 0.2}})
        >>> hp
        {'opt': {'lr': 0.2, 'm': 0.9}}
    """
    for key, value in updates.items():
        if key not in hparams:
            hparams[key] = value
        elif isinstance(value, dict):
            update_hparams(hparams[key], value)
        else:
            hparams.update({key: value})
