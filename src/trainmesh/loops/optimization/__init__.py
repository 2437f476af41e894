"""1.x's ``pytorch_lightning.loops.optimization``: ``OptimizerLoop`` and ``ManualOptimization``, refused when
made (``TRAINER_LOOPS_REFUSAL``)."""

from trainmesh.loops.optimization.optimizer_loop import ManualOptimization, OptimizerLoop

__all__ = ["ManualOptimization", "OptimizerLoop"]
