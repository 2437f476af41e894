"""Reading the hyperparameter files a logger writes (``hparams.yaml``, and Lightning 1.x's
``tags.csv``), as Lightning's ``core.saving`` reads them: ``load_from_checkpoint(hparams_file=...)``
takes its hyperparameters from them (``trainmesh.core.saving`` re-exports these under Lightning's path).

>>> convert("[1, 2]")
[1, 2]
"""

from __future__ import annotations

import ast
import csv
import os
import warnings
from typing import Any

__all__ = ["convert", "load_hparams_file", "load_hparams_from_tags_csv", "load_hparams_from_yaml"]


def load_hparams_file(hparams_file: str | os.PathLike) -> Any:
    """The hyperparameters of a ``.yaml``/``.yml`` or ``.csv`` file, as Lightning's
    ``load_from_checkpoint(hparams_file=...)`` reads them.

    Args:
        hparams_file: the file; another extension is a ``ValueError``, as in Lightning.

    Examples:
        >>> load_hparams_file("hparams.txt")
        Traceback (most recent call last):
        ...
        ValueError: .csv, .yml or .yaml is required for `hparams_file`
    """
    extension = str(hparams_file).split(".")[-1].lower()
    if extension == "csv":
        return load_hparams_from_tags_csv(hparams_file)
    if extension in ("yml", "yaml"):
        return load_hparams_from_yaml(hparams_file)
    raise ValueError(".csv, .yml or .yaml is required for `hparams_file`")


def load_hparams_from_yaml(config_yaml: str | os.PathLike, use_omegaconf: bool = True) -> Any:
    """The hyperparameters in ``config_yaml``: a ``DictConfig`` where omegaconf is installed and
    ``use_omegaconf`` (and it takes the values), else a dict; ``{}`` with a ``RuntimeWarning`` when
    the file is missing, as Lightning's.

    Args:
        config_yaml: the file to read.
        use_omegaconf: return omegaconf's ``DictConfig`` when it is installed.

    Examples:
        >>> load_hparams_from_yaml("no/such/hparams.yaml")  # doctest: +SKIP
        {}
    """
    import yaml  # pyyaml is a dependency; imported here to keep `import trainmesh` lean

    if not os.path.exists(config_yaml):
        warnings.warn(f"Missing Tags: {config_yaml}.", RuntimeWarning, stacklevel=2)
        return {}
    with open(config_yaml, encoding="utf-8") as fp:
        hparams = yaml.full_load(fp)
    if use_omegaconf:
        try:
            from omegaconf import OmegaConf
            from omegaconf.errors import UnsupportedValueType, ValidationError
        except ImportError:
            return hparams
        try:
            return OmegaConf.create(hparams)
        except (UnsupportedValueType, ValidationError):
            pass
    return hparams


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike) -> dict[str, Any]:
    """The hyperparameters of a ``tags.csv`` (each value read back as a Python literal where it is
    one); ``{}`` with a ``RuntimeWarning`` when the file is missing.

    Args:
        tags_csv: the file to read.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tags.csv")
        >>> save_hparams_to_tags_csv(path, {"lr": 0.1, "name": "a"})
        >>> load_hparams_from_tags_csv(path)
        {'lr': 0.1, 'name': 'a'}
    """
    if not os.path.isfile(tags_csv):
        warnings.warn(f"Missing Tags: {tags_csv}.", RuntimeWarning, stacklevel=2)
        return {}
    with open(tags_csv, newline="") as fp:
        rows = list(csv.reader(fp))[1:]
    return {row[0]: convert(row[1]) for row in rows}


def convert(val: str) -> Any:
    """``val`` as the Python literal it spells, else the string itself.

    Args:
        val: the text of a value.

    Examples:
        >>> convert("0.5"), convert("True"), convert("adam")
        (0.5, True, 'adam')
    """
    try:
        return ast.literal_eval(val)
    except (ValueError, SyntaxError):
        return val
