"""Lightning's ``lightning.pytorch.strategies.deepspeed`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.strategies import DeepSpeedStrategy
from trainmesh.utilities.refusal import refused_class

remove_module_hooks = refused_class(
    "remove_module_hooks",
    "it removes DeepSpeed's hooks from a module, and trainmesh has no DeepSpeed strategy; use strategy='fsdp' or 'zero1'",
    module=__name__,
)

__all__ = ["DeepSpeedStrategy", "remove_module_hooks"]
