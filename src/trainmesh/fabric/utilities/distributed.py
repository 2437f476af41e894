"""``lightning.fabric.utilities.distributed``: trainmesh's ``trainmesh.utilities.distributed`` (the same objects,
imported on first use), with ``DistributedSamplerWrapper`` and ``is_shared_filesystem`` from where trainmesh keeps
them."""

from trainmesh.utilities.distributed_samplers import DistributedSamplerWrapper
from trainmesh.utilities.filesystem import is_shared_filesystem
from trainmesh.utilities.lazy import alias_of

__all__ = ["DistributedSamplerWrapper", "is_shared_filesystem"]

__getattr__, __dir__ = alias_of("trainmesh.utilities.distributed")
