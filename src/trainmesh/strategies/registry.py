"""The one table that maps strategy names to strategies, and what each named strategy states.

Apart from the package's ``__init__`` so that a module below a strategy (``memory_estimate``, which
``strategy="auto"`` uses) can read the named strategies' capabilities without importing
``AutoStrategy``: the import graph stays a tree (checked by ``tests/test_architecture.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from trainmesh.strategies.capabilities import MemoryModel, StrategyCapabilities
from trainmesh.strategies.ddp import DDP2Strategy, DDPStrategy, ZeRO1Strategy
from trainmesh.strategies.dp import DataParallelStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.layers_on_devices import LayersOnDevicesStrategy
from trainmesh.strategies.model_parallel import ModelParallelStrategy
from trainmesh.strategies.protocol import Placement, Strategy
from trainmesh.strategies.single import SingleDeviceStrategy

# name -> a constructor taking the run's placement.
STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "single": SingleDeviceStrategy,
    "ddp": DDPStrategy,
    "ddp_spawn": functools.partial(DDPStrategy, start_method="spawn"),
    "ddp_fork": functools.partial(DDPStrategy, start_method="fork"),
    "ddp2": DDP2Strategy,
    "dp": DataParallelStrategy,
    "zero1": ZeRO1Strategy,
    "sharded": functools.partial(FSDPStrategy, reshard_after_forward=False),
    "fsdp": FSDPStrategy,
    "hsdp": functools.partial(FSDPStrategy, hybrid=True),
    # Model parallelism (ModelParallelStrategy(pp=, tp=, dp_shard=, dp_replicate=) for other layouts):
    "tp": functools.partial(ModelParallelStrategy, tp=-1, dp_shard=1),  # every process one tensor-parallel way
    "pp": functools.partial(ModelParallelStrategy, pp=-1, dp_shard=1),  # every process one pipeline stage
    "fsdp_tp": functools.partial(ModelParallelStrategy, tp=2, dp_shard=-1),  # 2-D: tp pairs, sharded across them
    "pp_replicate": lambda placement: _pipeline_within_nodes(placement),  # stages within a node, replicas across
    "layers_on_devices": LayersOnDevicesStrategy,  # one process, layers over its devices
}


def _pipeline_within_nodes(placement: Placement) -> ModelParallelStrategy:
    """Each node's devices hold one pipeline (a stage each); the nodes are its replicas."""
    return ModelParallelStrategy(
        pp=len(placement.devices), dp_replicate=-1, dp_shard=1, pp_within_node=True, placement=placement
    )


@functools.cache
def stated_capabilities() -> dict[str, StrategyCapabilities]:
    """Each named strategy's capabilities as it states them for a default placement, by name
    (for the tools that take a strategy's name before any run: estimate, project).

    Examples:
        >>> stated_capabilities()["fsdp"].shards_parameters  # doctest: +SKIP
        True
    """
    return {name: make(placement=Placement()).capabilities for name, make in STRATEGIES.items()}


def memory_models() -> dict[str, MemoryModel]:
    """Each named strategy's memory model (``capabilities.memory_model``), where it states one.

    Examples:
        >>> sorted(memory_models())[:3]  # doctest: +SKIP
        ['ddp', 'ddp2', 'ddp_fork']
    """
    stated = {name: caps.memory_model for name, caps in stated_capabilities().items()}
    return {name: model for name, model in stated.items() if model is not None}
