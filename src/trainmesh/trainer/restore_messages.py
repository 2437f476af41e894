"""Lightning 2.6's two lines around a checkpoint a stage loads (its checkpoint connector's
``resume_start`` and ``resume_end``), logged at INFO as Lightning's ``rank_zero_info`` does: programs
(and their users reading the log) see which file a fit resumed from or a test loaded."""

from __future__ import annotations

from trainmesh.utilities.rank_zero import rank_zero_info


def announce_restoring(source: str) -> None:
    """Before the checkpoint is read: ``Restoring states from the checkpoint path at <path>``."""
    rank_zero_info(f"Restoring states from the checkpoint path at {source}")


def announce_restored(source: str, stage: str) -> None:
    """Once it is restored: all states for a fit, the weights for validate/test/predict."""
    message = "Restored all states" if stage == "fit" else "Loaded model weights"
    rank_zero_info(f"{message} from the checkpoint at {source}")
