"""Lightning's strategy strings (``Trainer(strategy="ddp_find_unused_parameters_true")``): every name
in the strategy registry of Lightning 2.6 and of pytorch-lightning 1.9.5, each as the trainmesh
strategy that does the same thing, or refused with the reason.

Lightning's programs pass these strings as often as the plain names (a GAN's
``"ddp_find_unused_parameters_true"``, a notebook's ``"ddp_notebook"``), so a port that keeps its
``Trainer(...)`` line must get the same strategy, not "not known". The table below was read from
``StrategyRegistry.available_strategies()`` of both installed versions; the test
``tests/strategies/test_lightning_strings.py`` reads the registries again and checks that every
name is here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.single import SingleDeviceStrategy

_DDP_START = {"ddp": "elastic", "ddp_spawn": "spawn", "ddp_fork": "fork", "ddp_notebook": "fork"}


def _ddp_variants() -> dict[str, Callable[..., Any]]:
    """``ddp``/``ddp_spawn``/``ddp_fork``/``ddp_notebook``, each ``_find_unused_parameters_true``/``_false``.

    ``ddp_notebook`` is Lightning's fork start for Jupyter, as ``ddp_fork``. The plain names are in
    registry.py; only ``ddp_notebook`` (no suffix) is added here."""
    made: dict[str, Callable[..., Any]] = {"ddp_notebook": functools.partial(DDPStrategy, start_method="fork")}
    for prefix, start in _DDP_START.items():
        for unused in (True, False):
            name = f"{prefix}_find_unused_parameters_{str(unused).lower()}"
            made[name] = functools.partial(DDPStrategy, start_method=start, find_unused_parameters=unused)
    return made


_SHARDED = functools.partial(FSDPStrategy, reshard_after_forward=False)

# Lightning's name -> a constructor taking the run's placement (as registry.STRATEGIES' entries).
LIGHTNING_STRATEGIES: dict[str, Callable[..., Any]] = {
    **_ddp_variants(),
    "single_device": SingleDeviceStrategy,
    "fsdp_cpu_offload": functools.partial(FSDPStrategy, cpu_offload=True),
    # pytorch-lightning 1.9.5's names that 2.0 removed.
    "ddp_sharded": _SHARDED,
    "ddp_sharded_find_unused_parameters_false": _SHARDED,
    "ddp_sharded_spawn": functools.partial(_SHARDED, start_method="spawn"),
    "ddp_sharded_spawn_find_unused_parameters_false": functools.partial(_SHARDED, start_method="spawn"),
    "ddp_fully_sharded": FSDPStrategy,
    "fsdp_native": FSDPStrategy,
    "fsdp_native_full_shard_offload": functools.partial(FSDPStrategy, cpu_offload=True),
}

_INSTEAD = "use strategy='ddp', 'fsdp', 'zero1' or 'sharded' (CPU and CUDA)"

# Lightning's names trainmesh cannot run: the reason the user is told.
REFUSED_STRATEGIES: dict[str, str] = {
    **{
        name: "trainmesh has no DeepSpeed strategy (its ZeRO stages: 'zero1' is stage 1, 'sharded' stage 2, "
        "'fsdp' stage 3; FSDPStrategy(cpu_offload=True) for the offload variants)"
        for name in (
            "deepspeed",
            "deepspeed_stage_1",
            "deepspeed_stage_2",
            "deepspeed_stage_2_offload",
            "deepspeed_stage_3",
            "deepspeed_stage_3_offload",
            "deepspeed_stage_3_offload_nvme",
        )
    },
    **{
        name: "TPUs and XLA devices (torch_xla) are not supported by trainmesh"
        for name in ("xla", "xla_debug", "single_xla", "single_tpu", "tpu_spawn", "tpu_spawn_debug")
    },
    "horovod": "Horovod is not supported by trainmesh (DDP does the same all-reduce)",
    "bagua": "Bagua is not supported by trainmesh",
    "colossalai": "ColossalAI is not supported by trainmesh",
    "hpu_parallel": "Habana HPUs are not supported by trainmesh",
    "hpu_single": "Habana HPUs are not supported by trainmesh",
    "ipu_strategy": "Graphcore IPUs are not supported by trainmesh",
}


def lightning_strategy(name: str) -> Callable[..., Any] | None:
    """The constructor for Lightning's strategy string ``name`` (None: not one of Lightning's);
    a name trainmesh cannot run raises, saying why and what to use.

    Args:
        name: the string given as ``Trainer(strategy=...)``, lower case.

    Examples:
        >>> lightning_strategy("ddp_find_unused_parameters_true").keywords["find_unused_parameters"]
        True
        >>> lightning_strategy("ddp") is None  # trainmesh's own name: registry.STRATEGIES
        True
    """
    if name in REFUSED_STRATEGIES:
        raise ValueError(f"strategy={name!r} is Lightning's, but {REFUSED_STRATEGIES[name]}; {_INSTEAD}")
    return LIGHTNING_STRATEGIES.get(name)
