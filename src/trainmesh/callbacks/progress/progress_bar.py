"""Lightning's ``callbacks.progress.progress_bar`` path: ``ProgressBar``, the base a custom bar
subclasses (trainmesh's drawing bar), and ``get_standard_metrics`` (what a bar shows beside the
logged values), for a program that imports them from here."""

from trainmesh.callbacks.progress import ProgressBar, get_standard_metrics

__all__ = ["ProgressBar", "get_standard_metrics"]
