"""Lightning's ``lightning.pytorch.loops.optimization.closure`` path: its public names (loops/lightning_internals.py
says what each is here)."""

from trainmesh.loops.lightning_internals import AbstractClosure, OutputResult

__all__ = ["AbstractClosure", "OutputResult"]
