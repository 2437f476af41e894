"""Strategy names and how ``Trainer(strategy=...)`` becomes a strategy (the table itself: registry.py).

The names below are imported when first used (PEP 562), as the package's face does: a run imports
the modules of the strategy it builds (``strategy="ddp"`` never imports FSDP's, the pipeline's or
tensor parallelism's), and ``from trainmesh.strategies import FSDPStrategy`` imports that one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from trainmesh.strategies.auto import AutoStrategy
    from trainmesh.strategies.capabilities import MemoryModel, StrategyCapabilities
    from trainmesh.strategies.ddp import DDP2Strategy, DDPStrategy, ZeRO1Strategy
    from trainmesh.strategies.dp import DataParallelStrategy
    from trainmesh.strategies.fault_tolerance import FaultTolerance
    from trainmesh.strategies.fsdp import FSDPStrategy
    from trainmesh.strategies.layers_on_devices import LayersOnDevicesStrategy
    from trainmesh.strategies.lightning_names import (
        BaguaStrategy,
        ColossalAIStrategy,
        DDPFullyShardedNativeStrategy,
        DDPFullyShardedStrategy,
        DDPShardedStrategy,
        DDPSpawnShardedStrategy,
        DDPSpawnStrategy,
        DeepSpeedStrategy,
        HivemindStrategy,
        HorovodStrategy,
        HPUParallelStrategy,
        IPUStrategy,
        ParallelStrategy,
        SingleHPUStrategy,
        SingleTPUStrategy,
        TPUSpawnStrategy,
    )
    from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
    from trainmesh.strategies.model_parallel import ModelParallelStrategy
    from trainmesh.strategies.protocol import Placement, Strategy
    from trainmesh.strategies.registry import STRATEGIES, memory_models, stated_capabilities
    from trainmesh.strategies.single import SingleDeviceStrategy

_LIGHTNING_NAMES = (
    "BaguaStrategy",
    "ColossalAIStrategy",
    "DDPFullyShardedNativeStrategy",
    "DDPFullyShardedStrategy",
    "DDPShardedStrategy",
    "DDPSpawnShardedStrategy",
    "DDPSpawnStrategy",
    "DeepSpeedStrategy",
    "HivemindStrategy",
    "HorovodStrategy",
    "HPUParallelStrategy",
    "IPUStrategy",
    "ParallelStrategy",
    "SingleHPUStrategy",
    "SingleTPUStrategy",
    "TPUSpawnStrategy",
)
# name -> its module (in this package): each imported on first use.
_LAZY = {
    "AutoStrategy": "auto",
    "MemoryModel": "capabilities",
    "StrategyCapabilities": "capabilities",
    "DDP2Strategy": "ddp",
    "DDPStrategy": "ddp",
    "ZeRO1Strategy": "ddp",
    "DataParallelStrategy": "dp",
    "FaultTolerance": "fault_tolerance",
    "FaultTolerantDDPStrategy": "fault_tolerance",
    "FaultTolerantFSDPStrategy": "fault_tolerance",
    "FSDPStrategy": "fsdp",
    "LayersOnDevicesStrategy": "layers_on_devices",
    **dict.fromkeys(_LIGHTNING_NAMES, "lightning_names"),
    "lightning_strategy": "lightning_strings",
    "ParallelDims": "mesh",
    "ParallelMesh": "mesh",
    "ModelParallelStrategy": "model_parallel",
    "Placement": "protocol",
    "Strategy": "protocol",
    "STRATEGIES": "registry",
    "memory_models": "registry",
    "stated_capabilities": "registry",
    "SemiSyncDDPStrategy": "semi_sync",
    "SingleDeviceStrategy": "single",
    "StrategyRegistry": "strategy_registry",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


def fault_tolerant_strategy(strategy: str | Any, placement: Placement, fault_tolerance: FaultTolerance) -> Strategy:
    """``strategy="ddp"`` or ``"fsdp"`` (or a DDPStrategy's / FSDPStrategy's options) over torchft;
    any other strategy is refused before training, saying why."""
    from trainmesh.strategies.ddp import DDPStrategy
    from trainmesh.strategies.fault_tolerance import FaultTolerance, FaultTolerantDDPStrategy, FaultTolerantFSDPStrategy
    from trainmesh.strategies.fsdp import FSDPStrategy
    from trainmesh.strategies.semi_sync import SemiSyncDDPStrategy

    if not isinstance(fault_tolerance, FaultTolerance):
        raise TypeError(f"fault_tolerance={fault_tolerance!r}: pass trainmesh.FaultTolerance(lighthouse=..., ...)")
    if isinstance(strategy, (DDPStrategy, FSDPStrategy)) and type(strategy) in (DDPStrategy, FSDPStrategy):
        options: dict[str, Any] = dict(strategy.init_arguments)  # type: ignore[union-attr]  # recorded by __new__
        kind = "ddp" if type(strategy) is DDPStrategy else "fsdp"
    elif strategy in ("ddp", "fsdp"):
        options, kind = {}, strategy
    else:
        raise ValueError(
            f"fault_tolerance works with strategy='ddp' (a replica group is one process) or strategy='fsdp' (a "
            f"group shards the model over its processes, replicated across groups: HSDP), gradients averaged over "
            f"each step's quorum of groups by torchft; not with strategy={strategy!r}. Use one of those two, or "
            "leave fault_tolerance out"
        )
    if fault_tolerance.sync != "every_step":
        if kind != "ddp":
            raise ValueError(
                f"fault_tolerance: sync={fault_tolerance.sync!r} is checked with strategy='ddp' (one process per "
                "replica group) only; groups of several fsdp processes under LocalSGD/DiLoCo are not tested yet. "
                "Use strategy='ddp' with devices=1 per group, or sync='every_step' with fsdp"
            )
        return SemiSyncDDPStrategy(fault_tolerance=fault_tolerance, placement=placement, **options)
    if kind == "ddp":
        return FaultTolerantDDPStrategy(fault_tolerance=fault_tolerance, placement=placement, **options)
    return FaultTolerantFSDPStrategy(fault_tolerance=fault_tolerance, placement=placement, **options)


def build_strategy(strategy: str | Any, placement: Placement, *, fault_tolerance: Any = None) -> Strategy:
    """Turn ``Trainer(strategy=...)`` into a strategy for ``placement``; "auto" picks by process count
    (provisionally: with several, ``Runtime.trainer_port.choose_strategy`` decides by memory once the model is known).
    With ``fault_tolerance`` (a :class:`FaultTolerance`), "ddp" over torchft's quorum (fault_tolerance.py).

    Args:
        strategy: a name or a Strategy object.
        placement: the devices and precision.
        fault_tolerance: a :class:`FaultTolerance` (None: none) (default ``None``).

    Examples:
        >>> from trainmesh.strategies import Placement
        >>> build_strategy("single", Placement("cpu", (0,))).name  # doctest: +SKIP
        'single'
    """
    from trainmesh.strategies.registry import STRATEGIES  # each strategy's module: when its name is looked up
    from trainmesh.utilities.suggestions import did_you_mean

    if fault_tolerance is not None:
        return fault_tolerant_strategy(strategy, placement, fault_tolerance)
    if isinstance(strategy, str):
        name = strategy.lower()
        if name == "auto":
            name = "single" if len(placement.devices) * placement.num_nodes == 1 else "ddp"
        if (registered := _registered_by_program(strategy)) is not None:
            return build_strategy(registered, placement)
        if name not in STRATEGIES and (lightning := _lightning_strategy(name)) is not None:
            return lightning(placement=placement)  # type: ignore[no-any-return]
        if name not in STRATEGIES:
            raise ValueError(
                f"strategy={strategy!r} is not known; choose one of: auto, {', '.join(sorted(STRATEGIES))}."
                + did_you_mean(name, ["auto", *STRATEGIES])
            )
        return STRATEGIES[name](placement=placement)
    if not callable(getattr(strategy, "with_placement", None)):
        raise TypeError(f"strategy={strategy!r} is neither a strategy name nor a strategy object")
    placed: Strategy = strategy.with_placement(placement)  # a user's strategy object: typed from here on
    from trainmesh.strategies.arguments import in_place  # the program's object is the one that runs

    return in_place(strategy, placed, placement)  # type: ignore[no-any-return]


def _registered_by_program(name: str) -> Any:
    """The strategy a program registered as ``name`` in Lightning's ``StrategyRegistry``, built (None: not one)."""
    import sys

    if "trainmesh.strategies.strategy_registry" not in sys.modules:  # never imported: nothing registered
        return None
    from trainmesh.strategies.strategy_registry import StrategyRegistry, registered_by_program

    return StrategyRegistry.get(name) if registered_by_program(name) else None


def _lightning_strategy(name: str) -> Any:
    """Lightning's strategy names (lightning_strings.py), imported only for a name that is not trainmesh's."""
    from trainmesh.strategies.lightning_strings import lightning_strategy

    return lightning_strategy(name)


__all__ = [
    "STRATEGIES",
    "AutoStrategy",
    "BaguaStrategy",
    "ColossalAIStrategy",
    "DDPFullyShardedNativeStrategy",
    "DDPFullyShardedStrategy",
    "DDPShardedStrategy",
    "DDPSpawnShardedStrategy",
    "DDPSpawnStrategy",
    "DeepSpeedStrategy",
    "HPUParallelStrategy",
    "HivemindStrategy",
    "HorovodStrategy",
    "IPUStrategy",
    "ParallelStrategy",
    "SingleHPUStrategy",
    "SingleTPUStrategy",
    "TPUSpawnStrategy",
    "DDP2Strategy",
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "FaultTolerance",
    "LayersOnDevicesStrategy",
    "MemoryModel",
    "ModelParallelStrategy",
    "ParallelDims",
    "ParallelMesh",
    "Placement",
    "SingleDeviceStrategy",
    "StrategyRegistry",
    "Strategy",
    "StrategyCapabilities",
    "ZeRO1Strategy",
    "build_strategy",
    "memory_models",
    "stated_capabilities",
]
