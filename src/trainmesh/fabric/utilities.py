"""``lightning.fabric.utilities``: the utilities (rank_zero_only, move_data_to_device, ...), trainmesh's (trainmesh.utilities), which Lightning's
Trainer side and Fabric share."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities")
