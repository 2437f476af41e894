"""``lightning.fabric.accelerators``: the accelerator classes, trainmesh's (trainmesh.accelerators), which Lightning's
Trainer side and Fabric share; Fabric's module paths below it (``accelerators.cuda``, ``.registry``, ...) answer
with the same objects."""

from trainmesh.utilities.lazy import alias_modules, alias_of

__getattr__, __dir__ = alias_of("trainmesh.accelerators")

alias_modules(
    __name__,
    {
        "accelerator": "trainmesh.accelerators.accelerator",
        "cpu": "trainmesh.accelerators.cpu",
        # Fabric's `find_usable_cuda_devices` and `is_cuda_available` live beside its CUDAAccelerator
        "cuda": ("trainmesh.accelerators.cuda", "trainmesh.accelerators", "trainmesh.accelerator_types"),
        "mps": "trainmesh.accelerators.mps",
        "registry": "trainmesh.accelerators",  # call_register_accelerators: refused, with its reason
        "xla": "trainmesh.accelerators.xla",
    },
)
