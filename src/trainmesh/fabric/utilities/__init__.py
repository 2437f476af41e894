"""``lightning.fabric.utilities``: the utilities (rank_zero_only, move_data_to_device, ...), trainmesh's (trainmesh.utilities), which Lightning's
Trainer side and Fabric share. Its submodules answer Fabric's module paths
(``lightning.fabric.utilities.throughput``, ``.rank_zero``, ``.seed``, ...): each aliases trainmesh's module of the same
job, or, where trainmesh has none (``throughput``'s ``Throughput``), holds Fabric's definition."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities")
