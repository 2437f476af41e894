"""``lightning.fabric.utilities.warnings``: trainmesh's ``trainmesh.utilities.warnings`` (the same objects, imported on first use)."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities.warnings")
