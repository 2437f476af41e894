"""1.x's ``pytorch_lightning.loops.fit_loop``: ``FitLoop``, refused when made (``TRAINER_LOOPS_REFUSAL``)."""

from trainmesh.loops.lightning_internals import RestartStage
from trainmesh.loops.loop import trainer_loop_class

__all__ = ["FitLoop", "RestartStage"]

FitLoop = trainer_loop_class("FitLoop", __name__)
