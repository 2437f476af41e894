"""Hyperparameters as loggers store them: Lightning's conversions (``lightning.fabric.utilities.logger``)."""

from __future__ import annotations

import inspect
import json
from argparse import Namespace
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, is_dataclass
from typing import Any


def flatten_params(params: Any, delimiter: str = "/", parent_key: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a/b": 1}``; a Namespace or dataclass read as its dict, a list of
    dicts by index, None as nothing.

    >>> flatten_params({"a": {"b": 1}, "dl": [{"x": 2}], "l": [1, 2]})
    {'a/b': 1, 'dl/0/x': 2, 'l': [1, 2]}
    """
    if params is None:
        return {}
    if isinstance(params, Namespace):
        params = vars(params)
    result: dict[str, Any] = {}
    for key, value in params.items():
        new_key = f"{parent_key}{delimiter}{key}" if parent_key else str(key)
        if is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        elif isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, MutableMapping):
            result.update(flatten_params(value, delimiter, new_key))
        elif isinstance(value, list) and value and all(isinstance(item, MutableMapping) for item in value):
            for index, item in enumerate(value):
                result.update(flatten_params(item, delimiter, f"{new_key}/{index}"))
        else:
            result[new_key] = value
    return result


def sanitize_callables(params: Mapping[str, Any]) -> dict[str, Any]:
    """A class as its name; a callable as its result where it takes no argument, else its name."""

    def sanitize(value: Any) -> Any:
        if inspect.isclass(value):
            return value.__name__
        if callable(value):
            try:
                result = value()
            except Exception:
                return getattr(value, "__name__", None)
            return value.__name__ if callable(result) else result
        return value

    return {key: sanitize(value) for key, value in params.items()}


def json_serializable(params: Mapping[str, Any]) -> dict[str, Any]:
    """A value JSON cannot write, as its ``str``."""

    def writable(value: Any) -> bool:
        try:
            json.dumps(value)
        except (TypeError, ValueError, OverflowError):
            return False
        return True

    return {k: v if writable(v) else str(v) for k, v in params.items()}


def add_prefix(metrics: Mapping[str, Any], prefix: str, separator: str) -> dict[str, Any]:
    """``{"loss": 1}`` as ``{"train-loss": 1}`` for prefix "train" (unchanged without one)."""
    if not prefix:
        return dict(metrics)
    return {f"{prefix}{separator}{k}": v for k, v in metrics.items()}
