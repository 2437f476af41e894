"""``lightning.fabric.utilities.cloud_io``: trainmesh's ``trainmesh.utilities.cloud_io`` (the same objects, imported on first use)."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities.cloud_io")
