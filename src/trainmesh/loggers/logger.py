"""Lightning's ``lightning.pytorch.loggers.logger`` module path: a logger of one's own is written
``from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment`` (Lightning's logging
page), so the port imports the same names from here."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainmesh.loggers.base import DummyExperiment, FabricLogger, Logger, on_rank_zero

__all__ = ["DummyExperiment", "DummyLogger", "FabricLogger", "Logger", "merge_dicts", "rank_zero_experiment"]


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorate a logger's ``experiment`` property body: the real experiment on global rank 0, a
    :class:`DummyExperiment` (every call does nothing) on the other ranks, as Lightning's.

    Args:
        fn: the method that makes or returns the experiment.

    Examples:
        >>> class MyLogger(Logger):
        ...     @property
        ...     @rank_zero_experiment
        ...     def experiment(self):
        ...         return "the writer"
        >>> MyLogger().experiment
        'the writer'
    """

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        return fn(self) if on_rank_zero() else DummyExperiment()

    return experiment


class DummyLogger(Logger):
    """Lightning's stand-in logger: every call does nothing (a feature that disables the user's
    logger while keeping their code running).

    Examples:
        >>> DummyLogger().experiment.add_scalar("x", 1.0) is None
        True
    """

    def __init__(self) -> None:
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
        return self._experiment

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def __getitem__(self, idx: int) -> DummyLogger:
        return self  # enables self.logger[0].experiment.add_image(...)

    def __getattr__(self, name: str) -> Callable[..., None]:
        def method(*args: Any, **kwargs: Any) -> None:
            return None

        return method


def merge_dicts(
    dicts: Sequence[Mapping[str, Any]],
    agg_key_funcs: Mapping[str, Any] | None = None,
    default_func: Callable[[Sequence[float]], float] = statistics.mean,
) -> dict[str, Any]:
    """One dictionary from several: each key's values (None left out) aggregated by its function in
    ``agg_key_funcs`` or by ``default_func``; nested dictionaries merged the same way, with the
    nested mapping of ``agg_key_funcs`` (Lightning's ``loggers.logger.merge_dicts``).

    Args:
        dicts: the dictionaries to merge.
        agg_key_funcs: key -> function of the list of that key's values (a mapping for a nested key).
        default_func: the function for keys ``agg_key_funcs`` does not name (the mean by default).

    Examples:
        >>> merge_dicts([{"a": 1.0, "b": {"c": 2}}, {"a": 3.0, "b": {"c": 4}}], {"b": {"c": max}})
        {'a': 2.0, 'b': {'c': 4}}
    """
    agg_key_funcs = agg_key_funcs or {}
    keys = set().union(*(d.keys() for d in dicts))
    merged: dict[str, Any] = {}
    for key in keys:
        function = agg_key_funcs.get(key)
        values = [d[key] for d in dicts if d.get(key) is not None]
        if isinstance(values[0], dict):
            merged[key] = merge_dicts(values, function, default_func)
        else:
            merged[key] = (function or default_func)(values)
    return merged
