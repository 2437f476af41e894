"""Lightning Fabric's API (``lightning.fabric``) over trainmesh's Runtime: ``trainmesh.Fabric``.

>>> import trainmesh as tm
>>> tm.Fabric(accelerator="cpu", devices=1).world_size
1

See docs/how-to/fabric.md: what a Fabric program gets, and what differs from Lightning Fabric.
"""

from trainmesh.fabric import accelerators, loggers, plugins, strategies, utilities, wrappers
from trainmesh.fabric.fabric import Fabric
from trainmesh.fabric.wrappers import is_wrapped
from trainmesh.seed import seed_everything

__all__ = [
    "Fabric",
    "accelerators",
    "is_wrapped",
    "loggers",
    "plugins",
    "seed_everything",
    "strategies",
    "utilities",
    "wrappers",
]
