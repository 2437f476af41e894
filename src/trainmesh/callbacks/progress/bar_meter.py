"""The throughput a progress bar shows (samples/s, MFU): a ``ThroughputMonitor`` the bar owns and
calls from its own hooks, so that ``trainer.callbacks`` lists what Lightning's lists (the bar,
no monitor) while every run with a bar still shows its throughput."""

from __future__ import annotations

from typing import Any

from trainmesh.trainer_view import TrainerView


def bar_meter(trainer: TrainerView, current: Any) -> Any:
    """The bar's monitor for this run: ``current`` (kept across runs: its FLOP count is made
    once), a new one sending nothing to the loggers (their files hold what the program logged,
    as Lightning's), or None where the program gave a ``ThroughputMonitor`` of its own (it
    would count twice; the bar shows that one's figures, read from the callbacks).

    >>> from types import SimpleNamespace
    >>> type(bar_meter(SimpleNamespace(callbacks=[]), None)).__name__
    'ThroughputMonitor'
    """
    from trainmesh.callbacks.throughput import ThroughputMonitor  # torch-heavy: imported when a run starts

    if any(isinstance(callback, ThroughputMonitor) for callback in getattr(trainer, "callbacks", ())):
        return None
    return current if current is not None else ThroughputMonitor(to_loggers=False)
