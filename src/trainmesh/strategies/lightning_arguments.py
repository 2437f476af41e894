"""Lightning 2.6's strategy arguments (``DDPStrategy(ddp_comm_hook=...)``,
``FSDPStrategy(auto_wrap_policy={Block}, sharding_strategy="SHARD_GRAD_OP")``,
``SingleDeviceStrategy(device="cpu")``), each turned into what trainmesh's strategy does, or
refused before training with what, why and what to use instead.

A ported program keeps its ``Trainer(strategy=...)`` line: its arguments must mean what they mean
in Lightning, not raise ``TypeError`` and not be dropped. The arguments that name the run's
hardware or plugins (``accelerator``, ``parallel_devices``, ``cluster_environment``,
``checkpoint_io``, ``precision_plugin``) are the Trainer's settings here: the first two are checked
against the Trainer's devices, the plugins go to ``Trainer(plugins=[...])``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# Lightning's base Strategy/ParallelStrategy arguments.
HARDWARE = ("accelerator", "parallel_devices", "cluster_environment", "checkpoint_io", "precision_plugin")
_PLUGIN_INSTEAD = {
    "cluster_environment": "Trainer(plugins=[environment])",
    "checkpoint_io": "Trainer(plugins=[checkpoint_io])",
    "precision_plugin": "Trainer(precision=...) or Trainer(plugins=[precision_plugin])",
}


def _device_type(accelerator: Any) -> str:
    """``"cpu"``/``"cuda"``/``"mps"`` of an accelerator string or object (Lightning's or trainmesh's)."""
    if isinstance(accelerator, str):
        return {"gpu": "cuda"}.get(accelerator.lower(), accelerator.lower())
    name = type(accelerator).__name__.lower()
    return next((kind for kind in ("cpu", "cuda", "mps") if kind in name), name)


def _key(device: torch.device) -> tuple[str, int]:
    return device.type, 0 if device.type == "cpu" else (device.index or 0)


def check_hardware(owner: str, given: dict[str, Any], placement: Any) -> None:
    """Refuse a plugin passed to the strategy, and an accelerator or devices that differ from the
    Trainer's (``placement``; None before the Trainer gives it)."""
    for name, instead in _PLUGIN_INSTEAD.items():
        if given.get(name) is not None:
            raise ValueError(
                f"{owner}({name}=...) is Lightning's way to pass a plugin through the strategy; trainmesh's "
                f"strategies take the run's plugins from the Trainer, so it would be ignored here. Use {instead}"
            )
    if placement is None:
        return
    accelerator, devices = given.get("accelerator"), given.get("parallel_devices")
    if accelerator is not None and _device_type(accelerator) != placement.device_type:
        raise ValueError(
            f"{owner}(accelerator={accelerator!r}) asks for {_device_type(accelerator)!r}, but the Trainer runs on "
            f"{placement.device_type!r}; trainmesh takes the accelerator from Trainer(accelerator=...): pass it there"
        )
    if devices is not None:
        asked = [torch.device(d) for d in devices]
        runs = [torch.device(placement.device_type, i) for i in placement.devices]
        # Lightning lists CPU devices without an index ([cpu] * n): their count and type are what they say.
        if [_key(d) for d in asked] != [_key(d) for d in runs]:
            raise ValueError(
                f"{owner}(parallel_devices={asked}) differs from the Trainer's devices {runs}; trainmesh takes the "
                "devices from Trainer(accelerator=..., devices=...): pass them there"
            )


# ---- DDPStrategy ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CommHook:
    """Lightning's ``ddp_comm_state``/``ddp_comm_hook``/``ddp_comm_wrapper``, for DDP's ``register_comm_hook``."""

    hook: Callable[..., Any]
    state: Any = None
    wrapper: Callable[..., Any] | None = None

    def register(self, ddp: nn.Module) -> None:
        """As Lightning's ``_register_ddp_comm_hook``: the wrapper around the hook, then DDP's registration
        (called on CUDA only, as Lightning's DDPStrategy does)."""
        if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
            raise ValueError(
                f"DDPStrategy(ddp_comm_hook=...) registers on torch's DDP, but configure_ddp returned a "
                f"{type(ddp).__name__}; register the hook in configure_ddp yourself, or leave ddp_comm_hook out"
            )
        hook = self.wrapper(self.hook) if self.wrapper is not None else self.hook
        ddp.register_comm_hook(state=self.state, hook=hook)


# torch DDP's own arguments that the strategy sets itself (the module, its devices, the group).
_DDP_SET_HERE = ("module", "device_ids", "output_device", "process_group", "device_mesh")


def ddp_arguments(owner: str, kwargs: dict[str, Any]) -> tuple[dict[str, Any], CommHook | None]:
    """DDP options (torch's own keywords) and the communication hook from Lightning's arguments.

    >>> ddp_arguments("DDPStrategy", {"broadcast_buffers": False, "accelerator": "cpu"})
    ({'broadcast_buffers': False}, None)
    """
    rest = {k: v for k, v in kwargs.items() if k not in HARDWARE}
    state, hook, wrapper = (
        rest.pop("ddp_comm_state", None),
        rest.pop("ddp_comm_hook", None),
        rest.pop("ddp_comm_wrapper", None),
    )
    period = rest.pop("model_averaging_period", None)
    if period is not None or type(state).__name__ == "PostLocalSGDState":
        raise ValueError(
            f"{owner}: post-local SGD (ddp_comm_state=PostLocalSGDState(...), model_averaging_period) is not "
            "implemented by trainmesh's DDPStrategy: the replicas would drift apart without the periodic model "
            "averaging. Use plain DDP, or Trainer(fault_tolerance=FaultTolerance(sync=...)) for local SGD"
        )
    if hook is None and (state is not None or wrapper is not None):
        raise ValueError(
            f"{owner}: ddp_comm_state/ddp_comm_wrapper without ddp_comm_hook would do nothing (Lightning ignores "
            "them too). Pass ddp_comm_hook (e.g. default_hooks.allreduce_hook) with them, or leave them out"
        )
    accepted = set(inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters) - {"self"}
    for name in rest:
        if name in _DDP_SET_HERE:
            raise ValueError(
                f"{owner}({name}=...): trainmesh's strategy sets DDP's {name} itself from the Trainer's devices and "
                "its process group; leave it out"
            )
        if name not in accepted:
            raise TypeError(
                f"{owner}() got an unexpected keyword argument {name!r} (neither Lightning's nor torch DDP's)"
            )
    return rest, CommHook(hook, state, wrapper) if hook is not None else None


# ---- FSDPStrategy -----------------------------------------------------------------------------
# sharding_strategy -> (reshard_after_forward, hybrid): FSDP1's names as FSDP2 spells them.
_SHARDING = {
    "FULL_SHARD": (True, False),
    "SHARD_GRAD_OP": (False, False),
    "HYBRID_SHARD": (True, True),
    "_HYBRID_SHARD_ZERO2": (False, True),
}
# FSDP1 keywords that only tune speed or memory, with nothing to tune in FSDP2 (prefetching is
# implicit, all-gathers are rate-limited by design, parameters are always the original ones):
# no number of the run changes, so they are accepted (the value FSDP2 always behaves as, for use_orig_params).
_FSDP1_TUNING = {
    "limit_all_gathers": None,
    "forward_prefetch": None,
    "backward_prefetch": None,
    "use_orig_params": True,
}


def wrap_classes(owner: str, name: str, policy: Any) -> list[type[nn.Module]]:
    """The module classes of Lightning's policy: a set of classes, torch's ``ModuleWrapPolicy``, or
    ``functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={...})``.

    >>> wrap_classes("FSDPStrategy", "auto_wrap_policy", {nn.Linear})
    [<class 'torch.nn.modules.linear.Linear'>]
    """
    if isinstance(policy, (set, frozenset, list, tuple)):
        classes = list(policy)
    elif type(policy).__name__ == "ModuleWrapPolicy":
        classes = list(policy._module_classes)
    elif (
        isinstance(policy, functools.partial) and getattr(policy.func, "__name__", "") == "transformer_auto_wrap_policy"
    ):
        classes = list(policy.keywords.get("transformer_layer_cls", ()))
    else:
        raise ValueError(
            f"{owner}({name}={policy!r}): trainmesh (FSDP2) shards by module classes, and this policy's choice cannot "
            f"be read as classes; pass the classes as a set, {name}={{Block}} (or FSDPStrategy(min_num_params=N) "
            "for a size-based choice)"
        )
    if not classes or not all(isinstance(c, type) and issubclass(c, nn.Module) for c in classes):
        raise ValueError(f"{owner}({name}={policy!r}): give a set of nn.Module classes, e.g. {{Block}}")
    return classes


def _sharding(owner: str, sharding_strategy: Any) -> tuple[bool, bool]:
    name = sharding_strategy if isinstance(sharding_strategy, str) else getattr(sharding_strategy, "name", "")
    if name.upper() == "NO_SHARD":
        raise ValueError(
            f"{owner}(sharding_strategy='NO_SHARD') replicates the whole model and all-reduces gradients, which is "
            "DDP: use strategy='ddp' (or DDPStrategy(...)) instead"
        )
    if name.upper() not in _SHARDING:
        raise ValueError(f"{owner}(sharding_strategy={sharding_strategy!r}); choose one of {sorted(_SHARDING)}")
    return _SHARDING[name.upper()]


def _mesh_shard_size(owner: str, device_mesh: Any) -> tuple[int, int]:
    if not (isinstance(device_mesh, tuple) and len(device_mesh) == 2 and all(isinstance(n, int) for n in device_mesh)):
        raise ValueError(
            f"{owner}(device_mesh={device_mesh!r}): trainmesh builds the mesh once its processes exist; pass the "
            "shape as a tuple (replicas, shard group size), e.g. device_mesh=(2, 4)"
        )
    return device_mesh


def check_mixed_precision(owner: str, mixed_precision: Any, precision: Any) -> None:
    """Accept FSDP's ``MixedPrecision`` only where it is what the Trainer's precision already does
    (parameters computed in its dtype, gradients reduced in float32, buffers as they are)."""
    if mixed_precision is None:
        return
    param, reduce = getattr(mixed_precision, "param_dtype", None), getattr(mixed_precision, "reduce_dtype", None)
    buffer = getattr(mixed_precision, "buffer_dtype", None)
    same = precision.mixed and param == precision.compute_dtype and reduce == torch.float32
    if not (same and buffer in (None, torch.float32)):
        raise ValueError(
            f"{owner}(mixed_precision={mixed_precision!r}) differs from what Trainer(precision={precision.name!r}) "
            "does here (a '-mixed' precision computes in its dtype and reduces gradients in float32; buffers keep "
            "float32). trainmesh takes the precision from the Trainer: set Trainer(precision='bf16-mixed' / "
            "'16-mixed' / 'bf16-true') and leave mixed_precision out"
        )


def fsdp_arguments(owner: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """trainmesh's FSDPStrategy options for Lightning's arguments (hardware, mixed precision and
    ``activation_checkpointing`` handled by the caller).

    >>> fsdp_arguments("FSDPStrategy", {"sharding_strategy": "SHARD_GRAD_OP", "state_dict_type": "full"})
    {'reshard_after_forward': False, 'hybrid': False, 'state_dict_type': 'full'}
    """
    rest = {k: v for k, v in kwargs.items() if k not in (*HARDWARE, "mixed_precision")}
    options: dict[str, Any] = {}
    if (policy := rest.pop("auto_wrap_policy", None)) is not None:
        options["wrap"] = wrap_classes(owner, "auto_wrap_policy", policy)
    if (policy := rest.pop("activation_checkpointing_policy", None)) is not None:
        options["activation_checkpointing"] = wrap_classes(owner, "activation_checkpointing_policy", policy)
    if "sharding_strategy" in rest:
        options["reshard_after_forward"], options["hybrid"] = _sharding(owner, rest.pop("sharding_strategy"))
    if (mesh := rest.pop("device_mesh", None)) is not None:
        options["replicas"], options["shard_size"] = _mesh_shard_size(owner, mesh)
    if "state_dict_type" in rest:
        if rest["state_dict_type"] not in ("full", "sharded"):
            raise ValueError(f"{owner}(state_dict_type={rest['state_dict_type']!r}); use 'full' or 'sharded'")
        options["state_dict_type"] = rest.pop("state_dict_type")
    for name, value in rest.items():
        if name not in _FSDP1_TUNING:
            raise TypeError(
                f"{owner}() got an unexpected keyword argument {name!r}: it is neither trainmesh's nor one of "
                "Lightning's FSDPStrategy arguments trainmesh honours (FSDP1 keywords other than "
                f"{sorted(_FSDP1_TUNING)} have no FSDP2 counterpart)"
            )
        if _FSDP1_TUNING[name] is not None and value != _FSDP1_TUNING[name]:
            raise ValueError(f"{owner}({name}={value!r}): FSDP2 always keeps the original parameters; leave it out")
    return options


def refuse_twice(owner: str, given: dict[str, Any], lightning: dict[str, Any]) -> None:
    """A setting named both in trainmesh's words and in Lightning's (``wrap=`` and ``auto_wrap_policy=``):
    which one wins would be a guess."""
    both = sorted(name for name in lightning if name in given and name not in ("state_dict_type", "replicas"))
    if both:
        raise ValueError(
            f"{owner}: {both} given both as trainmesh's arguments and through Lightning's "
            "(auto_wrap_policy, activation_checkpointing_policy, sharding_strategy, device_mesh); keep one spelling"
        )


def refuse_unknown(owner: str, kwargs: dict[str, Any], known: tuple[str, ...]) -> None:
    """Python's own error for a keyword the class does not take."""
    for name in kwargs:
        if name not in known:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


def check_device(device: Any, placement: Any) -> None:
    """Lightning's ``SingleDeviceStrategy(device=...)`` against the Trainer's one device."""
    asked, runs = torch.device(device), torch.device(placement.device_type, placement.devices[0])
    if (asked.type, asked.index or 0) != (runs.type, runs.index or 0):
        raise ValueError(
            f"SingleDeviceStrategy(device={str(asked)!r}) differs from the Trainer's device {str(runs)!r}; trainmesh "
            f"takes the device from the Trainer: Trainer(accelerator={asked.type!r}, devices=[{asked.index or 0}])"
        )
