"""``lightning.fabric.utilities.enums``: trainmesh's ``trainmesh.utilities.enums`` (the same objects, imported on first use)."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities.enums")
