"""``lightning.fabric.strategies``: the strategy classes (a DDPStrategy/FSDPStrategy object is a Fabric(strategy=...) argument), trainmesh's (trainmesh.strategies), which Lightning's
Trainer side and Fabric share."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.strategies")
