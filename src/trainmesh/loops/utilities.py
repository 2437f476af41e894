"""Lightning's ``lightning.pytorch.loops.utilities`` path: its public names (loops/lightning_internals.py
says what each is here)."""

from trainmesh.loops.lightning_internals import check_finite_loss

__all__ = ["check_finite_loss"]
