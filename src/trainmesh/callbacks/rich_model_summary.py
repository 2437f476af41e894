"""Lightning's ``lightning.pytorch.callbacks.rich_model_summary`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.callbacks.model_summary import RichModelSummary

__all__ = ["RichModelSummary"]
