"""pytorch-lightning 1.x's ``pytorch_lightning.loops``, which Lightning 2.0 removed: ``Loop``, the base class of
a loop of one's own (``loop.run()``), as 1.9.5 defines it; the Trainer's loops (``FitLoop``,
``TrainingEpochLoop``, ``OptimizerLoop``, ...) are importable and refused when made, with what to do instead
(``TRAINER_LOOPS_REFUSAL``)."""

from __future__ import annotations

from trainmesh.loops.loop import TRAINER_LOOPS_REFUSAL, Loop, trainer_loop_class

__all__ = [
    "DataLoaderLoop",
    "EvaluationEpochLoop",
    "EvaluationLoop",
    "FitLoop",
    "Loop",
    "ManualOptimization",
    "OptimizerLoop",
    "PredictionEpochLoop",
    "PredictionLoop",
    "TRAINER_LOOPS_REFUSAL",
    "TrainingBatchLoop",
    "TrainingEpochLoop",
]

DataLoaderLoop = trainer_loop_class("DataLoaderLoop", __name__)
EvaluationEpochLoop = trainer_loop_class("EvaluationEpochLoop", __name__)
EvaluationLoop = trainer_loop_class("EvaluationLoop", __name__)
PredictionEpochLoop = trainer_loop_class("PredictionEpochLoop", __name__)
PredictionLoop = trainer_loop_class("PredictionLoop", __name__)
TrainingBatchLoop = trainer_loop_class("TrainingBatchLoop", __name__)
TrainingEpochLoop = trainer_loop_class("TrainingEpochLoop", __name__)
# where the published examples import them from: loops.fit_loop, loops.optimization(.optimizer_loop)
from trainmesh.loops.fit_loop import FitLoop  # noqa: E402
from trainmesh.loops.optimization import ManualOptimization, OptimizerLoop  # noqa: E402
