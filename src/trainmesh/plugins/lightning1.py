"""Lightning 1.x's plugin names, each made into today's object with a deprecation warning naming it.

Up to 1.5 a strategy was a "training type plugin" passed in ``plugins``:
``Trainer(gpus=2, plugins=DDPPlugin(find_unused_parameters=False))`` is today
``Trainer(accelerator="cuda", devices=2, strategy=DDPStrategy(find_unused_parameters=False))``.
``DDPPlugin(...)`` returns that ``DDPStrategy``, and the Trainer takes a strategy found in
``plugins`` as its ``strategy`` (``trainer/plugins_argument.py``). 1.9's precision plugin names
(``NativeMixedPrecisionPlugin(16, "cuda")``) become 2.x's (``MixedPrecision("16-mixed", "cuda")``).
Hardware and libraries trainmesh has no strategy for (TPU, IPU, HPU, DeepSpeed, Horovod,
ColossalAI, Apex) are refused with what to use instead.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

# Lightning 1.x's precision plugin names that 2.x's plugins.precision still holds are defined there.
from trainmesh.plugins.precision import (  # noqa: F401  # this module's 1.x names, re-exported
    DeepSpeedPrecisionPlugin,
    DoublePrecisionPlugin,
    FSDPPrecision,
    MixedPrecisionPlugin,
    PrecisionPlugin,
    mixed_precision_of,
)
from trainmesh.strategies.registry import STRATEGIES
from trainmesh.utilities.refusal import refused_class, renamed_class

# Each object a 1.x name below made, by its id: a Trainer given one runs as pytorch-lightning 1.x's
# (trainer/lightning1/trainer_members.py), as one given any other spelling only 1.x has.
_MADE_BY_OLD_NAME: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def made_by_lightning1_name(value: Any) -> bool:
    """Whether ``value`` was made by one of the 1.x names of this module (``DDPPlugin(...)``)."""
    return _MADE_BY_OLD_NAME.get(id(value)) is value


def _today(old: str, new: str, make: Callable[..., Any]) -> type:
    @functools.wraps(make)  # (its signature is the old name's)
    def made(*args: Any, **kwargs: Any) -> Any:
        value = make(*args, **kwargs)
        _MADE_BY_OLD_NAME[id(value)] = value
        return value

    return renamed_class(old, new, made, module=__name__)


def _named(name: str, **fixed: Any) -> Callable[..., Any]:
    """Today's strategy ``name`` (``registry.STRATEGIES``) with ``fixed`` keyword arguments, as a
    ``functools.partial`` would make it (a caller's keyword wins), looked up when the old name is
    constructed: the strategy's module is imported then, not with the Trainer."""

    def make(*args: Any, **kwargs: Any) -> Any:
        return STRATEGIES[name](*args, **{**fixed, **kwargs})

    return make


def _fsdp_mixed(precision: Any = 16, device: str = "cuda", scaler: Any = None) -> FSDPPrecision:
    return FSDPPrecision("bf16-mixed" if str(precision).startswith("bf16") else "16-mixed", scaler)


# Training type plugins (Lightning <= 1.5), each today's strategy.
DDPPlugin = _today("DDPPlugin", "strategy=DDPStrategy(...) (or strategy='ddp')", _named("ddp"))
DDPSpawnPlugin = _today(
    "DDPSpawnPlugin",
    "strategy='ddp_spawn' (DDPStrategy(start_method='spawn'))",
    _named("ddp_spawn"),
)
DDP2Plugin = _today("DDP2Plugin", "strategy='ddp2'", _named("ddp2"))
DataParallelPlugin = _today("DataParallelPlugin", "strategy='dp'", _named("dp"))
SingleDevicePlugin = _today("SingleDevicePlugin", "strategy='single'", lambda *a, **k: STRATEGIES["single"]())
# Sharded data parallel (fairscale's optimizer-state and gradient sharding): FSDP that keeps the
# parameters gathered between forward and backward (trainmesh's strategy='sharded').
DDPShardedPlugin = _today("DDPShardedPlugin", "strategy='sharded'", _named("sharded"))
DDPSpawnShardedPlugin = _today(
    "DDPSpawnShardedPlugin",
    "FSDPStrategy(reshard_after_forward=False, start_method='spawn')",
    _named("sharded", start_method="spawn"),
)
DDPFullyShardedPlugin = _today("DDPFullyShardedPlugin", "strategy='fsdp' (FSDPStrategy)", _named("fsdp"))

# Precision plugins (Lightning 1.x's names of 2.x's).
NativeMixedPrecisionPlugin = _today(
    "NativeMixedPrecisionPlugin", "MixedPrecision('16-mixed', device)", mixed_precision_of
)
ShardedNativeMixedPrecisionPlugin = _today(
    "ShardedNativeMixedPrecisionPlugin", "MixedPrecision('16-mixed', device)", mixed_precision_of
)
FullyShardedNativeMixedPrecisionPlugin = _today(
    "FullyShardedNativeMixedPrecisionPlugin", "FSDPPrecision('16-mixed')", _fsdp_mixed
)
FullyShardedNativeNativeMixedPrecisionPlugin = _today(
    "FullyShardedNativeNativeMixedPrecisionPlugin", "FSDPPrecision('16-mixed')", _fsdp_mixed
)


def _refused(name: str, reason: str) -> type:
    return refused_class(name, reason, module=__name__)


_INSTEAD = (
    "trainmesh runs on CPU and CUDA: use strategy='ddp', 'fsdp' or 'zero1' and precision='16-mixed' / 'bf16-mixed'"
)
DeepSpeedPlugin = _refused("DeepSpeedPlugin", f"trainmesh has no DeepSpeed strategy; {_INSTEAD}")
HorovodPlugin = _refused(
    "HorovodPlugin", f"trainmesh has no Horovod strategy (DDP does the same all-reduce); {_INSTEAD}"
)
TPUSpawnPlugin = _refused("TPUSpawnPlugin", f"TPUs (torch_xla) are not supported; {_INSTEAD}")
SingleTPUPlugin = _refused("SingleTPUPlugin", f"TPUs (torch_xla) are not supported; {_INSTEAD}")
IPUPlugin = _refused("IPUPlugin", f"Graphcore IPUs are not supported; {_INSTEAD}")
ApexMixedPrecisionPlugin = _refused("ApexMixedPrecisionPlugin", f"NVIDIA Apex's AMP is not supported; {_INSTEAD}")
ColossalAIPrecisionPlugin = _refused("ColossalAIPrecisionPlugin", f"ColossalAI is not supported; {_INSTEAD}")
HPUPrecisionPlugin = _refused("HPUPrecisionPlugin", f"Habana HPUs are not supported; {_INSTEAD}")
IPUPrecisionPlugin = _refused("IPUPrecisionPlugin", f"Graphcore IPUs are not supported; {_INSTEAD}")
TPUPrecisionPlugin = _refused("TPUPrecisionPlugin", f"TPUs (torch_xla) are not supported; {_INSTEAD}")
TPUBf16PrecisionPlugin = _refused("TPUBf16PrecisionPlugin", f"TPUs (torch_xla) are not supported; {_INSTEAD}")

# Lightning 1.x's plugin strings (plugins="ddp_sharded"), as today's strategy names.
STRATEGY_STRINGS = {
    "ddp": "ddp",
    "ddp_spawn": "ddp_spawn",
    "ddp2": "ddp2",
    "dp": "dp",
    "ddp_sharded": "sharded",
    "ddp_sharded_spawn": "sharded",
    "fsdp": "fsdp",
    "ddp_fully_sharded": "fsdp",
    "ddp_find_unused_parameters_false": "ddp_find_unused_parameters_false",
}
