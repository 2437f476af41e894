"""Lightning's ``StrategyRegistry`` (advanced/strategy_registry.rst): a dict of strategy names, each
with the class and the arguments ``get(name)`` builds it with; ``register`` adds a program's own
(``Trainer(strategy="that_name")`` then builds it, as Lightning's accelerator connector does).

It holds Lightning 2.6's 26 names, each as the trainmesh class that runs it (``ddp_spawn``:
``DDPStrategy(start_method="spawn")``); the names trainmesh cannot run (DeepSpeed, XLA/TPU) are there
too, as in Lightning, and ``get`` of one raises, saying why. The class below is Lightning's
``_StrategyRegistry`` (lightning/fabric/strategies/registry.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.lightning_strings import lightning_strategy
from trainmesh.strategies.single import SingleDeviceStrategy


class _StrategyRegistry(dict):  # type: ignore[type-arg]  # Lightning's: a plain dict of entries
    """Strategy names -> ``{"strategy", "strategy_name", "description", "init_params"}``."""

    def register(
        self,
        name: str,
        strategy: Callable[..., Any] | None = None,
        description: str | None = None,
        override: bool = False,
        **init_params: Any,
    ) -> Callable[..., Any]:
        """Register ``strategy`` (a class or callable) under ``name``, built with ``init_params``;
        without ``strategy``, a decorator."""
        if not (name is None or isinstance(name, str)):
            raise TypeError(f"`name` must be a str, found {name}")
        if name in self and not override:
            raise ValueError(f"'{name}' is already present in the registry. HINT: Use `override=True`.")
        data: dict[str, Any] = {
            "description": description if description is not None else "",
            "init_params": init_params,
        }

        def do_register(strategy: Callable[..., Any]) -> Callable[..., Any]:
            data["strategy"] = strategy
            data["strategy_name"] = name
            self[name] = data
            return strategy

        if strategy is not None:
            return do_register(strategy)
        return do_register

    def get(self, name: str, default: Any = None) -> Any:
        """The strategy registered as ``name``, built with its parameters."""
        if name in self:
            data = self[name]
            return data["strategy"](**data["init_params"])
        if default is not None:
            return default
        available_names = ", ".join(sorted(self.keys())) or "none"
        raise KeyError(f"'{name}' not found in registry. Available names: {available_names}")

    def remove(self, name: str) -> None:
        self.pop(name)

    def available_strategies(self) -> list[str]:
        return list(self.keys())

    def __str__(self) -> str:
        return "Registered Strategies: {}".format(", ".join(self.keys()))


def _refused(name: str) -> Callable[..., Any]:
    def refuse(**_: Any) -> Any:
        return lightning_strategy(name)  # raises, saying why and what to use

    refuse.__name__ = refuse.__qualname__ = f"refused_{name}"
    return refuse


_NVME = {"remote_device": "nvme", "offload_params_device": "nvme", "offload_optimizer_device": "nvme"}
# Lightning's arguments for the names trainmesh refuses (shown by the registry; get() refuses them).
_REFUSED_PARAMS: dict[str, dict[str, Any]] = {
    "deepspeed": {},
    "deepspeed_stage_1": {"stage": 1},
    "deepspeed_stage_2": {"stage": 2},
    "deepspeed_stage_2_offload": {"stage": 2, "offload_optimizer": True},
    "deepspeed_stage_3": {"stage": 3},
    "deepspeed_stage_3_offload": {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
    "deepspeed_stage_3_offload_nvme": {"stage": 3, "offload_optimizer": True, "offload_parameters": True, **_NVME},
    "single_xla": {},
    "xla_debug": {"debug": True},
    "xla": {},
    "single_tpu": {},
}


def _lightning_names(registry: _StrategyRegistry) -> None:
    """Lightning 2.6.6's registrations, in its order (``StrategyRegistry.available_strategies()``)."""
    for prefix, start in (("ddp", "popen"), ("ddp_spawn", "spawn"), ("ddp_fork", "fork"), ("ddp_notebook", "fork")):
        registry.register(prefix, DDPStrategy, start_method=start)
    for prefix, start in (("ddp", "popen"), ("ddp_spawn", "spawn"), ("ddp_fork", "fork"), ("ddp_notebook", "fork")):
        for unused in (False, True):
            name = f"{prefix}_find_unused_parameters_{str(unused).lower()}"
            registry.register(name, DDPStrategy, find_unused_parameters=unused, start_method=start)
    refused = list(_REFUSED_PARAMS)
    for name in [n for n in refused if n.startswith("deepspeed")]:
        registry.register(name, _refused(name), **_REFUSED_PARAMS[name])
    registry.register("fsdp", FSDPStrategy)
    registry.register("fsdp_cpu_offload", FSDPStrategy, cpu_offload=True)
    registry.register("single_device", SingleDeviceStrategy)
    for name in [n for n in refused if not n.startswith("deepspeed")]:
        registry.register(name, _refused(name), **_REFUSED_PARAMS[name])


StrategyRegistry = _StrategyRegistry()
_lightning_names(StrategyRegistry)
_BUILT_IN = dict(StrategyRegistry)  # what a program's own registration (or override) is told apart from


def registered_by_program(name: str) -> bool:
    """Whether ``name`` is a registration of the program's own (new, or overriding Lightning's)."""
    return name in StrategyRegistry and StrategyRegistry[name] is not _BUILT_IN.get(name)
