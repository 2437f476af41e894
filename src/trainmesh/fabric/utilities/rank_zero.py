"""``lightning.fabric.utilities.rank_zero``: trainmesh's ``trainmesh.utilities.rank_zero`` (the same objects, imported on first use)."""

from trainmesh.utilities.lazy import alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities.rank_zero")
