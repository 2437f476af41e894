"""The one table that maps strategy names to strategies, and what each named strategy states.

Apart from the package's ``__init__`` so that a module below a strategy (``memory_estimate``, which
``strategy="auto"`` uses) can read the named strategies' capabilities without importing
``AutoStrategy``: the import graph stays a tree (checked by ``tests/test_architecture.py``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from trainmesh.strategies.capabilities import MemoryModel, StrategyCapabilities
from trainmesh.strategies.protocol import Placement, Strategy

if TYPE_CHECKING:  # the modules the table names by string, for type checkers and the import graph's checks
    from trainmesh.strategies import ddp, dp, fsdp, layers_on_devices, model_parallel, single  # noqa: F401
    from trainmesh.strategies.model_parallel import ModelParallelStrategy

# name -> (module in this package, its constructor, the keyword arguments the name fixes).
_NAMED: dict[str, tuple[str, str, dict[str, Any]]] = {
    "single": ("single", "SingleDeviceStrategy", {}),
    "ddp": ("ddp", "DDPStrategy", {}),
    "ddp_spawn": ("ddp", "DDPStrategy", {"start_method": "spawn"}),
    "ddp_fork": ("ddp", "DDPStrategy", {"start_method": "fork"}),
    "ddp2": ("ddp", "DDP2Strategy", {}),
    "dp": ("dp", "DataParallelStrategy", {}),
    "zero1": ("ddp", "ZeRO1Strategy", {}),
    "sharded": ("fsdp", "FSDPStrategy", {"reshard_after_forward": False}),
    "fsdp": ("fsdp", "FSDPStrategy", {}),
    "hsdp": ("fsdp", "FSDPStrategy", {"hybrid": True}),
    # Model parallelism (ModelParallelStrategy(pp=, tp=, dp_shard=, dp_replicate=) for other layouts):
    "tp": ("model_parallel", "ModelParallelStrategy", {"tp": -1, "dp_shard": 1}),  # every process one tp way
    "pp": ("model_parallel", "ModelParallelStrategy", {"pp": -1, "dp_shard": 1}),  # every process one stage
    "fsdp_tp": ("model_parallel", "ModelParallelStrategy", {"tp": 2, "dp_shard": -1}),  # 2-D: tp pairs, sharded across
    "pp_replicate": ("registry", "_pipeline_within_nodes", {}),  # stages within a node, replicas across
    "layers_on_devices": ("layers_on_devices", "LayersOnDevicesStrategy", {}),  # one process, layers over its devices
}


class NamedStrategies(Mapping[str, Callable[..., Strategy]]):
    """The table of named strategies, read as a dict (name -> a constructor taking the run's
    placement) whose entry imports its strategy's module when first looked up: a run imports the
    strategy it builds, not every other (``strategy="ddp"`` never imports FSDP, the pipeline or DCP).

    Examples:
        >>> "fsdp" in STRATEGIES  # no import: the names are known without their modules
        True
    """

    def __init__(self, table: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
        self._table = table
        self._made: dict[str, Callable[..., Strategy]] = {}  # the same constructor at each look-up

    def __getitem__(self, name: str) -> Callable[..., Strategy]:
        if name not in self._made:
            module, attribute, fixed = self._table[name]  # KeyError for an unknown name, as a dict's
            make = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
            self._made[name] = functools.partial(make, **fixed) if fixed else make
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


STRATEGIES = NamedStrategies(_NAMED)


def _pipeline_within_nodes(placement: Placement) -> ModelParallelStrategy:
    """Each node's devices hold one pipeline (a stage each); the nodes are its replicas."""
    from trainmesh.strategies.model_parallel import ModelParallelStrategy

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
