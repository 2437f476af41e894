"""Lightning's ``lightning.pytorch.strategies.single_xla`` path: ``SingleDeviceXLAStrategy``, refused
(TPUs need torch_xla, which trainmesh does not run on)."""

from trainmesh.utilities.refusal import refused_class

SingleDeviceXLAStrategy = refused_class(
    "SingleDeviceXLAStrategy",
    "TPUs (torch_xla) are not supported by trainmesh; use strategy='auto' on accelerator='cpu', 'cuda' or 'mps'",
    module=__name__,
)

__all__ = ["SingleDeviceXLAStrategy"]
