"""1.x's ``pytorch_lightning.loops.optimization.optimizer_loop``: ``OptimizerLoop`` (and its ``ClosureResult``,
which only such a loop's subclass builds), refused when made (``TRAINER_LOOPS_REFUSAL``)."""

from trainmesh.loops.loop import trainer_loop_class

__all__ = ["ClosureResult", "ManualOptimization", "OptimizerLoop"]

ClosureResult = trainer_loop_class("ClosureResult", __name__)
ManualOptimization = trainer_loop_class("ManualOptimization", __name__)
OptimizerLoop = trainer_loop_class("OptimizerLoop", __name__)
