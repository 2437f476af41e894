"""trainmesh's progress bars under Lightning's names: ``ProgressBar``, the base a custom bar subclasses,
which draws nothing (progress_bar.py), and ``TQDMProgressBar`` and ``RichProgressBar``, trainmesh's
drawing bar (drawing_bar.py) with each Lightning class's arguments and the bars it gives a program to
read (stage_bars.py). The Trainer's default bar is one of these two, as Lightning's."""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.progress.bar_text import format_metrics, get_standard_metrics
from trainmesh.callbacks.progress.drawing_bar import DrawingProgressBar
from trainmesh.callbacks.progress.progress_bar import ProgressBar
from trainmesh.callbacks.progress.stage_bars import RichStageBars, TqdmStageBars

__all__ = [
    "DrawingProgressBar",
    "ProgressBar",
    "RichProgressBar",
    "TQDMProgressBar",
    "format_metrics",
    "get_standard_metrics",
]


# Lightning's names for its progress bars: templates pass them, and each one replaces the
# default bar (the Trainer recognizes these classes), so a run never draws two. Each takes its
# Lightning class's arguments in that class's order, so positional calls mean what they meant.
class TQDMProgressBar(TqdmStageBars, DrawingProgressBar):
    """trainmesh's bar under Lightning's name, with ``TQDMProgressBar``'s arguments in its order.

    Args:
        refresh_rate: update the bar every this many batches (0 hides it) (default ``1``).
        process_position: accepted and ignored: trainmesh draws one bar (default ``0``).
        leave: keep each epoch's bar on screen (default ``True``).
        **kwargs: ``DrawingProgressBar``'s other arguments (``console``).

    Examples:
        >>> bar = TQDMProgressBar(10, 0, False)
        >>> (bar.refresh_rate, bar.leave)
        (10, False)
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = True, **kwargs: Any) -> None:
        super().__init__(refresh_rate, leave, process_position=process_position, **kwargs)


class RichProgressBar(RichStageBars, DrawingProgressBar):
    """trainmesh's bar under Lightning's name, with ``RichProgressBar``'s arguments in its order.

    Args:
        refresh_rate: update the bar every this many batches (0 hides it) (default ``1``).
        leave: keep each epoch's bar on screen (default ``True``).
        theme: accepted and ignored: the bar has one look (default ``None``).
        console_kwargs: arguments for the rich Console trainmesh makes (default ``None``).
        **kwargs: ``DrawingProgressBar``'s other arguments (``console``).

    Examples:
        >>> bar = RichProgressBar(5, False)
        >>> (bar.refresh_rate, bar.leave)
        (5, False)
    """

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = True,
        theme: Any = None,
        console_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(refresh_rate, leave, theme, console_kwargs=console_kwargs, **kwargs)
