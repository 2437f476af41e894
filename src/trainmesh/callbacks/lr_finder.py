"""Lightning's ``lightning.pytorch.callbacks.lr_finder`` import path of ``LearningRateFinder``."""

from trainmesh.callbacks.finders import LearningRateFinder

__all__ = ["LearningRateFinder"]
