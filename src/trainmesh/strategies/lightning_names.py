"""Lightning's strategy names beyond trainmesh's own classes: ``ParallelStrategy`` (the base of
the strategies over several processes, for ``isinstance``), Lightning 1.9's strategy classes that
2.0 renamed (each makes today's strategy, with a deprecation warning), and those trainmesh cannot
run (DeepSpeed, Bagua, ColossalAI, Horovod, Hivemind, TPU, IPU, HPU), refused with the reason.
"""

from __future__ import annotations

import abc
import functools
import inspect
from typing import Any

from trainmesh.strategies.ddp import DDP2Strategy, DDPStrategy, ZeRO1Strategy
from trainmesh.strategies.dp import DataParallelStrategy
from trainmesh.strategies.fault_tolerance import FaultTolerantDDPStrategy, FaultTolerantFSDPStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.model_parallel import ModelParallelStrategy
from trainmesh.utilities.refusal import refused_class, renamed_class


class ParallelStrategy(abc.ABC):
    """Lightning's base class of the strategies that run several processes or devices: trainmesh's
    are registered with it, so that ``isinstance(trainer.strategy, ParallelStrategy)`` answers as in
    Lightning; it is not built directly (abstract, as Lightning's).

    The registered strategies: ``DDPStrategy``, ``DDP2Strategy``, ``ZeRO1Strategy``,
    ``DataParallelStrategy``, ``FSDPStrategy``, ``ModelParallelStrategy``,
    ``FaultTolerantDDPStrategy`` and ``FaultTolerantFSDPStrategy`` (not ``SingleDeviceStrategy``).

    Examples:
        >>> isinstance(DDPStrategy(), ParallelStrategy)
        True
        >>> isinstance(FSDPStrategy(), ParallelStrategy)
        True
    """

    @property
    @abc.abstractmethod
    def capabilities(self) -> Any: ...


for _parallel in (
    DDPStrategy,
    DDP2Strategy,
    ZeRO1Strategy,
    DataParallelStrategy,
    FSDPStrategy,
    ModelParallelStrategy,
    FaultTolerantDDPStrategy,
    FaultTolerantFSDPStrategy,
):
    ParallelStrategy.register(_parallel)

_INSTEAD = "use strategy='ddp', 'fsdp', 'zero1' or ModelParallelStrategy (CPU and CUDA)"


def _refused(name: str, why: str) -> type:
    return refused_class(name, f"{why}; {_INSTEAD}", module=__name__)


DeepSpeedStrategy = _refused("DeepSpeedStrategy", "trainmesh has no DeepSpeed strategy (its ZeRO stages: zero1, fsdp)")
BaguaStrategy = _refused("BaguaStrategy", "Bagua is not supported by trainmesh")
ColossalAIStrategy = _refused("ColossalAIStrategy", "ColossalAI is not supported by trainmesh")
HorovodStrategy = _refused("HorovodStrategy", "Horovod is not supported by trainmesh (DDP does the same all-reduce)")
HivemindStrategy = _refused("HivemindStrategy", "Hivemind is not supported by trainmesh")
TPUSpawnStrategy = _refused("TPUSpawnStrategy", "TPUs (torch_xla) are not supported by trainmesh")
SingleTPUStrategy = _refused("SingleTPUStrategy", "TPUs (torch_xla) are not supported by trainmesh")
IPUStrategy = _refused("IPUStrategy", "Graphcore IPUs are not supported by trainmesh")
HPUParallelStrategy = _refused("HPUParallelStrategy", "Habana HPUs are not supported by trainmesh")
SingleHPUStrategy = _refused("SingleHPUStrategy", "Habana HPUs are not supported by trainmesh")

_SHARDED = functools.partial(FSDPStrategy, reshard_after_forward=False)  # strategy="sharded"


def _renamed(old: str, new: str, make: Any, what: str, example: str) -> type:
    """A Lightning 1.9 strategy class renamed in 2.0: its docstring says what it makes, with an example."""
    doc = f"""Lightning 1.x's name; today: {new}.

    Constructing it warns (``LightningOneName``, a ``FutureWarning``) and returns {what}; the
    arguments given are passed on to it (keyword arguments: today's class takes no positional ones).

    Examples:
        >>> strategy = {old}({example})
        >>> # warns "{old} is Lightning 1.x's name; today: {new}"
    """
    return renamed_class(old, new, make, doc=inspect.cleandoc(doc))


DDPSpawnStrategy = _renamed(
    "DDPSpawnStrategy",
    "DDPStrategy(start_method='spawn')",
    functools.partial(DDPStrategy, start_method="spawn"),
    "a ``DDPStrategy(start_method='spawn')`` (its arguments: :class:`DDPStrategy`'s)",
    "process_group_backend='gloo'",
)
DDPShardedStrategy = _renamed(
    "DDPShardedStrategy",
    "strategy='sharded'",
    _SHARDED,
    "the ``sharded`` strategy, ``FSDPStrategy(reshard_after_forward=False)`` (ZeRO-2; its arguments: "
    ":class:`FSDPStrategy`'s)",
    "cpu_offload=False",
)
DDPSpawnShardedStrategy = _renamed(
    "DDPSpawnShardedStrategy",
    "FSDPStrategy(reshard_after_forward=False, start_method='spawn')",
    functools.partial(_SHARDED, start_method="spawn"),
    "the ``sharded`` strategy with spawned processes, as 1.9's: ``FSDPStrategy(reshard_after_forward=False, "
    "start_method='spawn')`` (ZeRO-2; its arguments: :class:`FSDPStrategy`'s)",
    "cpu_offload=False",
)
DDPFullyShardedStrategy = _renamed(
    "DDPFullyShardedStrategy",
    "FSDPStrategy",
    FSDPStrategy,
    "an :class:`FSDPStrategy` (FSDP2, ZeRO-3; its arguments: FSDPStrategy's)",
    "cpu_offload=True",
)
DDPFullyShardedNativeStrategy = _renamed(
    "DDPFullyShardedNativeStrategy",
    "FSDPStrategy",
    FSDPStrategy,
    "an :class:`FSDPStrategy` (FSDP2, ZeRO-3; its arguments: FSDPStrategy's)",
    "cpu_offload=True",
)
