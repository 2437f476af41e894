"""``lightning.fabric.strategies``: the strategy classes (a DDPStrategy/FSDPStrategy object is a Fabric(strategy=...)
argument), trainmesh's (trainmesh.strategies), which Lightning's Trainer side and Fabric share, and the XLA ones Fabric's
package adds (refused, with the reason); Fabric's module paths below it (``strategies.ddp``, ``.launchers``, ...)
answer with the same objects."""

from trainmesh.utilities.lazy import alias_modules, alias_of

_XLA = ("trainmesh.strategies.xla", "trainmesh.strategies.single_xla")

__getattr__, __dir__ = alias_of("trainmesh.strategies", *_XLA)

alias_modules(
    __name__,
    {
        **{
            leaf: f"trainmesh.strategies.{leaf}"
            for leaf in (
                "ddp",
                "deepspeed",
                "dp",
                "fsdp",
                "model_parallel",
                "parallel",
                "registry",
                "single_device",
                "single_xla",
                "strategy",
                "xla",
            )
        },
        "xla_fsdp": "trainmesh.strategies.xla",
        # Fabric's launchers are its internals (`_SubprocessScriptLauncher`, ...): trainmesh's Fabric starts its
        # processes with trainmesh's launchers, which these paths give
        **{
            path: "trainmesh.launchers"
            for path in (
                "launchers",
                "launchers.launcher",
                "launchers.multiprocessing",
                "launchers.subprocess_script",
                "launchers.xla",
            )
        },
    },
)
