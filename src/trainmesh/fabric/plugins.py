"""``lightning.fabric.plugins``: the plugins (a precision plugin is a Fabric(plugins=...) argument), trainmesh's (trainmesh.plugins), which Lightning's
Trainer side and Fabric share."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.plugins")
