"""Lightning's ``callbacks.progress.tqdm_progress`` path: ``TQDMProgressBar`` (trainmesh's bar
under Lightning's name), for a program that imports it from here."""

from trainmesh.callbacks.progress import TQDMProgressBar

__all__ = ["TQDMProgressBar"]
