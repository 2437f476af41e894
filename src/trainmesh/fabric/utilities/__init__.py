"""``lightning.fabric.utilities``: the utilities (rank_zero_only, move_data_to_device, ...), trainmesh's (trainmesh.utilities), which Lightning's
Trainer side and Fabric share, and Fabric's ``Throughput`` / ``ThroughputMonitor`` (``.throughput``). Its submodules answer Fabric's module paths
(``lightning.fabric.utilities.throughput``, ``.rank_zero``, ``.seed``, ...): each aliases trainmesh's module of the same
job, or, where trainmesh has none (``throughput``'s ``Throughput``), holds Fabric's definition. The paths whose Fabric
modules hold only Fabric's internals (``device_parser``'s ``_parse_gpu_ids``, ``init``'s ``_EmptyInit``, ...) are
registered below: each answers with trainmesh's module of the same job."""

from trainmesh.utilities.lazy import alias_modules, alias_of

__getattr__, __dir__ = alias_of("trainmesh.utilities", "trainmesh.fabric.utilities.throughput")

alias_modules(
    __name__,
    {
        "consolidate_checkpoint": "trainmesh.cli.checkpoint_command",  # `trainmesh checkpoint consolidate SRC DST`
        "device_dtype_mixin": "trainmesh.module",  # the module's `.to()` / `.device` / `.dtype`
        "device_parser": "trainmesh.accelerators",  # resolve_devices
        "init": "trainmesh.utilities.empty_init",
        "load": "trainmesh.fabric.checkpoints",
        "logger": "trainmesh.loggers.params",  # flatten_params, sanitize_callables, add_prefix
        "optimizer": "trainmesh.runtime_optimizer",
        "registry": "trainmesh.strategies.registry",
        "testing": "trainmesh.utilities.imports",  # what is installed: what Fabric's `_runif_reasons` asks
    },
)
