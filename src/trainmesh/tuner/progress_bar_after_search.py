"""The progress bar after a search, as Lightning's tuner leaves it."""

from __future__ import annotations

from typing import Any, Protocol


class _HoldsProgressBar(Protocol):
    @property
    def progress_bar_callback(self) -> Any: ...


def enable_progress_bar(trainer: _HoldsProgressBar) -> None:
    """Lightning's searches (2.6's and 1.9.5's, the learning-rate and the batch-size search alike) end with
    ``trainer.progress_bar_callback.enable()`` once the run's callbacks are back, before the weights are
    restored; a program's bar sees the call. (Their ``disable()`` before the search reaches no bar: by then
    the search's own callbacks have replaced the run's, so ``progress_bar_callback`` is None.)"""
    bar = trainer.progress_bar_callback
    if bar:
        bar.enable()
