"""Lightning's ``lightning.pytorch.loops.optimization.manual`` path: its public names (loops/lightning_internals.py
says what each is here)."""

from trainmesh.loops.lightning_internals import ManualResult

__all__ = ["ManualResult"]
