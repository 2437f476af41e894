"""Lightning's ``lightning.pytorch.loops.training_epoch_loop`` path: its public names (loops/lightning_internals.py
says what each is here)."""

from trainmesh.loops.lightning_internals import RestartStage

__all__ = ["RestartStage"]
