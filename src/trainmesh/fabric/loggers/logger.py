"""``lightning.fabric.loggers.logger``: the module path of Fabric's logger base and its
``rank_zero_experiment`` decorator, for a logger of one's own written against Fabric's."""

from trainmesh.fabric.loggers import Logger
from trainmesh.loggers.logger import rank_zero_experiment

__all__ = ["Logger", "rank_zero_experiment"]
