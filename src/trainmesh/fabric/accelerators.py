"""``lightning.fabric.accelerators``: the accelerator classes, trainmesh's (trainmesh.accelerators), which Lightning's
Trainer side and Fabric share."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.accelerators")
