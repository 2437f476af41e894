"""Lightning's ``lightning.pytorch.loops.optimization.automatic`` path: ``Closure`` (refused: see
loops/lightning_internals.py) and ``ClosureResult`` (the 1.x loop's, loops/optimization/optimizer_loop.py)."""

from trainmesh.loops.lightning_internals import Closure
from trainmesh.loops.optimization.optimizer_loop import ClosureResult

__all__ = ["Closure", "ClosureResult"]
