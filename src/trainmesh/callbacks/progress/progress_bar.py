"""Lightning's ``callbacks.progress.progress_bar`` path: ``ProgressBar``, the base a custom bar
subclasses (trainmesh's drawing bar), for a program that imports it from here."""

from trainmesh.callbacks.progress import ProgressBar

__all__ = ["ProgressBar"]
