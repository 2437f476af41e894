"""Lightning's ``lightning.pytorch.accelerators.xla`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.accelerator_types import XLAAccelerator
from trainmesh.utilities.refusal import refused_class

FabricXLAAccelerator = refused_class(
    "FabricXLAAccelerator",
    "TPUs (torch_xla) are not supported by trainmesh; use accelerator='cpu', 'cuda' or 'mps'",
    module=__name__,
)

__all__ = ["FabricXLAAccelerator", "XLAAccelerator"]
