"""Lightning Fabric's constructor arguments, turned into a :class:`trainmesh.Runtime`'s.

Fabric's connector (``lightning/fabric/connector.py``) resolves the same flags; what differs from the
Runtime's own reading is said here, each with Fabric's words: ``precision=None`` is "32-true",
``"16-mixed"`` on the CPU becomes "bf16-mixed" with Fabric's warning, the historical aliases (16, "bf16")
warn as Fabric's do, and ``strategy="dp"`` on the CPU becomes "ddp" with Fabric's warning.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trainmesh.launchers.agent_link import said_by_the_agent_process
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import global_rank_from_env

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime

# Fabric's info lines, on stderr as Lightning's (lightning_loggers.py)
log = lightning_named_logger(__name__)

# Fabric's accepted precision values (its _PRECISION_INPUT), and the historical ones' new names
_PRECISIONS = ("16-true", "16-mixed", "bf16-true", "bf16-mixed", "32-true", "64-true")
_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}
_REFUSED_PRECISIONS = {
    "transformer-engine": "NVIDIA Transformer Engine's fp8 layers (CUDA only), which trainmesh does not run",
    "transformer-engine-float16": "NVIDIA Transformer Engine's fp8 layers (CUDA only), which trainmesh does not run",
}
_REFUSED_STRATEGIES = {
    "deepspeed": "DeepSpeed's engine, which trainmesh does not run (use strategy='fsdp': sharded parameters, "
    "gradients and optimizer state)",
    "xla": "XLA devices (TPUs) through torch_xla, which this machine does not have",
    "xla_fsdp": "XLA devices (TPUs) through torch_xla, which this machine does not have",
}
# Fabric 2.6.6's registered strategy names (lightning.fabric.strategies.STRATEGY_REGISTRY): a Trainer-only
# name ('single_device', 'ddp_spawn_find_unused_parameters_true', ...) is refused as Fabric's connector does
_FABRIC_STRATEGIES = (
    "auto",
    "ddp",
    "ddp_find_unused_parameters_true",
    "ddp_fork",
    "ddp_notebook",
    "ddp_spawn",
    "dp",
    "fsdp",
    "fsdp_cpu_offload",
    "single_tpu",
    "single_xla",
    *_REFUSED_STRATEGIES,
)


def fabric_precision(precision: Any, device_type: str) -> str:
    """Fabric's precision flag as one of its names, with Fabric's warnings (connector.py)."""
    if precision is None:
        return "32-true"
    allowed = (*_REFUSED_PRECISIONS, *_PRECISIONS, 64, 32, 16, "64", "32", "16", "bf16")  # Fabric's order
    if precision not in allowed:
        raise ValueError(f"Precision {precision!r} is invalid. Allowed precision values: {allowed}")
    name = str(precision)
    if name in _REFUSED_PRECISIONS:
        raise ValueError(f"Fabric(precision={name!r}) asks for {_REFUSED_PRECISIONS[name]}; use 'bf16-mixed'")
    says = _says_the_constructor_s_lines()
    if name in _ALIASES:
        if name[:2] not in ("32", "64") and says:
            warnings.warn(
                f"`precision={name}` is supported for historical reasons but its usage is discouraged. "
                f"Please set your precision to {_ALIASES[name]} instead!",
                stacklevel=1,  # this line, as Fabric's points at its connector's
            )
        name = _ALIASES[name]
    if name == "16-mixed" and device_type == "cpu":
        if says:
            warnings.warn(
                "You passed `Fabric(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on "
                "CPU. Using `precision='bf16-mixed'` instead.",
                stacklevel=1,
            )
        name = "bf16-mixed"
    if name in ("16-mixed", "bf16-mixed") and says:
        mixed = "16-bit" if name == "16-mixed" else "bfloat16"
        log.info(f"Using {mixed} Automatic Mixed Precision (AMP)")
    return name


def _says_the_constructor_s_lines() -> bool:
    """Whether this process says Fabric's constructor lines. Fabric says them with rank_zero_warn /
    rank_zero_info, and under ddp its first process is rank 0, so they appear once; trainmesh's agent
    process said them before ``launch()`` ran the script again (``said_by_the_agent_process``)."""
    return global_rank_from_env() == 0 and not said_by_the_agent_process()


def fabric_strategy(strategy: Any, device_type: str) -> Any:
    """Fabric's strategy flag for the Runtime: a name or a strategy object (trainmesh's, which
    ``lightning.fabric.strategies`` names under the alias); the ones trainmesh cannot run refused."""
    if not isinstance(strategy, str):
        return strategy
    name = strategy.lower()
    if name not in _FABRIC_STRATEGIES and not name.startswith("deepspeed"):
        raise ValueError(  # Fabric's connector: its type and words
            f"You selected an invalid strategy name: `strategy={name!r}`."
            " It must be either a string or an instance of `lightning.fabric.strategies.Strategy`."
            " Example choices: auto, ddp, ddp_spawn, deepspeed, dp, ..."
            " Find a complete list of options in our documentation at https://lightning.ai"
        )
    if name in _REFUSED_STRATEGIES or name.startswith("deepspeed"):
        reason = _REFUSED_STRATEGIES.get(name, _REFUSED_STRATEGIES["deepspeed"])
        raise ValueError(f"Fabric(strategy={strategy!r}) asks for {reason}")
    if name == "dp" and device_type == "cpu":
        if _says_the_constructor_s_lines():
            warnings.warn(f"{name!r} is not supported on CPUs, hence setting `strategy='ddp'`.", stacklevel=1)
        return "ddp"
    return name  # Fabric's connector reads the name in lower case


def fabric_run_precision(plugins: Any, precision: Any, device_type: str) -> Any:
    """What the Runtime runs: the precision plugin given, as given (Fabric's connector takes its instance
    before reading any flag: ``MixedPrecision("16-mixed", "cpu")`` is float16 autocast with its scaler on
    the CPU, where the flag "16-mixed" becomes "bf16-mixed"), else the flag's name (``fabric_precision``).
    ``plugins`` checked as Fabric's connector checks them, with its words."""
    plugin = _precision_plugin(plugins)
    if plugin is None:
        return fabric_precision(precision, device_type)
    if precision is not None:
        raise ValueError(f"Received both `precision={precision}` and `plugins={plugin}`. Choose one.")
    from trainmesh.precision import Precision as RunPrecision

    device = getattr(plugin, "device", device_type)
    if plugin.precision.endswith("-mixed") and str(device).split(":")[0] != device_type:
        raise ValueError(
            f"Fabric(plugins={type(plugin).__name__}(precision={plugin.precision!r}, device={device!r})) on the "
            f"{device_type} accelerator: its autocast would be {device!r}'s, which leaves this device's computation "
            f"in float32; pass device={device_type!r}"
        )
    scaler = getattr(plugin, "scaler", None) if plugin.precision == "16-mixed" else None
    chosen = RunPrecision(plugin.precision, device_type=device_type, scaler=scaler)
    chosen.plugin = plugin
    return chosen


def _precision_plugin(plugins: Any) -> Any:
    """The precision plugin among ``plugins`` (None without one). Fabric's default checkpoint IO
    (``TorchCheckpointIO``) and the cluster environment the process is in are taken (trainmesh writes with
    ``torch.save`` and reads its place from the environment itself); a CheckpointIO of a program's own
    class, or an environment this process was not started by, is refused, saying why."""
    if plugins is None:
        return None
    from trainmesh.plugins import CheckpointIO, ClusterEnvironment, Precision, TorchCheckpointIO

    kinds: Counter[str] = Counter()
    found = None
    for plugin in [plugins] if not isinstance(plugins, Iterable) else plugins:  # Fabric's (a string's letters)
        if isinstance(plugin, Precision):
            found, kinds["Precision"] = plugin, kinds["Precision"] + 1
        elif isinstance(plugin, CheckpointIO):
            kinds["CheckpointIO"] += 1
            if type(plugin) is not TorchCheckpointIO:
                raise ValueError(
                    f"Fabric(plugins={plugin!r}): trainmesh's Fabric writes checkpoints with torch.save, as Fabric's "
                    "default TorchCheckpointIO does, and would not call this CheckpointIO's methods; leave it out"
                )
        elif isinstance(plugin, ClusterEnvironment):
            kinds["ClusterEnvironment"] += 1
            if (refusal := plugin.trainer_refusal()) is not None:
                raise ValueError(refusal)
        else:
            raise TypeError(
                f"Found invalid type for plugin {plugin}. Expected one of: Precision, CheckpointIO, ClusterEnvironment."
            )
    duplicated = [kind for kind, count in kinds.items() if count > 1]
    if duplicated:
        raise ValueError(
            f"Received multiple values for {', '.join(duplicated)} flags in `plugins`."
            " Expected one value for each type at most."
        )
    return found


def fabric_runtime(device_type: str, devices: Any, strategy: Any, precision: Any, num_nodes: int) -> Runtime:
    """The Runtime a Fabric runs on. Fabric says nothing about more CPU processes than physical cores:
    the Runtime's warning for that (issue 12, the Trainer's) is not said here; its refusal far beyond stays."""
    from trainmesh.accelerators import OVERSUBSCRIBED_CPU_WARNING
    from trainmesh.runtime import Runtime

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OVERSUBSCRIBED_CPU_WARNING)
        return Runtime(
            accelerator=device_type, devices=devices, strategy=strategy, precision=precision, num_nodes=num_nodes
        )
