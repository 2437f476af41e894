"""Lightning's ``callbacks.progress.rich_progress`` path: ``RichProgressBar`` (trainmesh's bar) and
``RichProgressBarTheme``, the styles Lightning's rich bar takes (``RichProgressBar(theme=...)``
accepts a theme and draws trainmesh's one look), so a program that imports them from here ports by
renaming its import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmesh.callbacks.progress import RichProgressBar
from trainmesh.utilities.refusal import refused_class

__all__ = [
    "BatchesProcessedColumn",
    "CustomBarColumn",
    "CustomInfiniteTask",
    "CustomProgress",
    "CustomTimeColumn",
    "MetricsTextColumn",
    "ProcessingSpeedColumn",
    "RichProgressBar",
    "RichProgressBarTheme",
]


@dataclass
class RichProgressBarTheme:
    """Lightning 2.6's styles of the rich progress bar's parts, with its defaults (rich style strings
    or ``rich.style.Style`` objects).

    Args:
        description: the description (``Epoch x``, ``Testing``).
        progress_bar: the bar in progress.
        progress_bar_finished: the finished bar.
        progress_bar_pulse: the bar over an iterable without a length.
        batch_progress: the batch count.
        time: the elapsed and remaining time.
        processing_speed: the batches per second.
        metrics: the metrics.
        metrics_text_delimiter: what separates the metrics.
        metrics_format: the format of metric values.

    Examples:
        >>> RichProgressBarTheme(metrics="grey7").metrics_format
        '.3f'
    """

    description: Any = ""
    progress_bar: Any = "#6206E0"
    progress_bar_finished: Any = "#6206E0"
    progress_bar_pulse: Any = "#6206E0"
    batch_progress: Any = ""
    time: Any = "dim"
    processing_speed: Any = "dim underline"
    metrics: Any = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


# The rich columns and progress object Lightning's bar builds itself from: trainmesh's bar draws its
# own, so a program subclassing these has nothing to plug them into.
_COLUMNS = (
    "one of the rich columns Lightning's RichProgressBar draws itself with; trainmesh's RichProgressBar "
    "draws its own line: style it with RichProgressBar(theme=RichProgressBarTheme(...)), or write a "
    "ProgressBar subclass of your own"
)
BatchesProcessedColumn = refused_class("BatchesProcessedColumn", _COLUMNS, module=__name__)
CustomBarColumn = refused_class("CustomBarColumn", _COLUMNS, module=__name__)
CustomInfiniteTask = refused_class("CustomInfiniteTask", _COLUMNS, module=__name__)
CustomProgress = refused_class("CustomProgress", _COLUMNS, module=__name__)
CustomTimeColumn = refused_class("CustomTimeColumn", _COLUMNS, module=__name__)
MetricsTextColumn = refused_class("MetricsTextColumn", _COLUMNS, module=__name__)
ProcessingSpeedColumn = refused_class("ProcessingSpeedColumn", _COLUMNS, module=__name__)
