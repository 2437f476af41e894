"""``lightning.fabric.plugins``: the plugins (a precision plugin is a Fabric(plugins=...) argument), trainmesh's
(trainmesh.plugins), which Lightning's Trainer side and Fabric share; Fabric's module paths below it
(``plugins.environments.slurm``, ``plugins.io.torch_io``, ``plugins.precision.amp``, ``plugins.collectives``,
...) answer with the same objects."""

from trainmesh.utilities.lazy import alias_modules, alias_of

__getattr__, __dir__ = alias_of("trainmesh.plugins", "trainmesh.fabric.collectives")

_ENVIRONMENTS = "trainmesh.plugins.environments"  # one module holds them all
_PRECISION = "trainmesh.plugins.precision"
_COLLECTIVES = "trainmesh.fabric.collectives"

alias_modules(
    __name__,
    {
        "collectives": _COLLECTIVES,
        "collectives.collective": _COLLECTIVES,
        "collectives.single_device": _COLLECTIVES,
        "collectives.torch_collective": _COLLECTIVES,
        "environments": _ENVIRONMENTS,
        **{
            f"environments.{leaf}": _ENVIRONMENTS
            for leaf in ("cluster_environment", "kubeflow", "lightning", "lsf", "mpi", "slurm", "torchelastic")
        },
        "environments.xla": (_ENVIRONMENTS, "trainmesh.accelerators"),  # Fabric's imports XLAAccelerator there
        "io": "trainmesh.plugins.io",
        **{f"io.{leaf}": "trainmesh.plugins.io" for leaf in ("checkpoint_io", "torch_io", "xla")},
        "precision": _PRECISION,
        **{
            f"precision.{leaf}": f"{_PRECISION}.{leaf}"
            for leaf in (
                "amp",
                "bitsandbytes",
                "deepspeed",
                "double",
                "fsdp",
                "half",
                "precision",
                "transformer_engine",
                "xla",
            )
        },
        # Fabric's private casting helpers (`_DtypeContextManager`, `_convert_fp_tensor`): trainmesh's are in precision.py
        "precision.utils": "trainmesh.precision",
    },
)
