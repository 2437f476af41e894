"""``lightning.fabric.utilities.types``: trainmesh's ``trainmesh.utilities.types`` (the same objects, imported on
first use), and Fabric's ``CollectibleGroup`` protocol (a process group: ``size()`` and ``rank()``)."""

from typing import Protocol, runtime_checkable

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities.types")


@runtime_checkable
class CollectibleGroup(Protocol):
    def size(self) -> int: ...

    def rank(self) -> int: ...
