"""Lightning's ``lightning.pytorch.strategies.xla`` path: ``XLAStrategy`` and the XLA plugins it
imports, each refused (TPUs need torch_xla, which trainmesh does not run on); and Fabric's ``XLAFSDPStrategy``
(``lightning.fabric.strategies.xla_fsdp``), refused for the same reason."""

from trainmesh.plugins.environments import XLAEnvironment
from trainmesh.plugins.io import XLACheckpointIO
from trainmesh.plugins.precision import XLAPrecision
from trainmesh.utilities.refusal import refused_class

XLAStrategy = refused_class(
    "XLAStrategy",
    "TPUs (torch_xla) are not supported by trainmesh; use strategy='ddp', 'fsdp', 'zero1' or ModelParallelStrategy (CPU and CUDA)",
    module=__name__,
)

XLAFSDPStrategy = refused_class(
    "XLAFSDPStrategy",
    "TPUs (torch_xla) are not supported by trainmesh, so neither is FSDP over XLA; "
    "use strategy='fsdp' (CPU and CUDA) or ModelParallelStrategy",
    module=__name__,
)

__all__ = ["XLACheckpointIO", "XLAEnvironment", "XLAFSDPStrategy", "XLAPrecision", "XLAStrategy"]
