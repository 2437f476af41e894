"""Lightning's accelerator classes: ``Trainer(accelerator=CUDAAccelerator())`` is
``Trainer(accelerator="cuda")``, and each class answers Lightning's questions about its device type
(``is_available``, ``auto_device_count``, ``parse_devices``, ``get_device_stats``).

trainmesh runs on CPU, CUDA and MPS; ``XLAAccelerator`` (TPUs) is refused with the reason. The
device settings themselves are resolved by ``accelerators.py`` (re-exported there under Lightning's
module name, ``trainmesh.accelerators``).

>>> CPUAccelerator.name(), CPUAccelerator.parse_devices("2"), CPUAccelerator.auto_device_count()
('cpu', 2, 1)
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.utilities.refusal import RefusedError, refused_class


class Accelerator:
    """The device type of a run, as Lightning's ``Accelerator`` describes it; a subclass of one of
    trainmesh's three (CPU, CUDA, MPS) may be passed as ``Trainer(accelerator=...)``."""

    def setup_device(self, device: torch.device) -> None:
        """Called once the process's device is known (CUDA: made current)."""

    def teardown(self) -> None:
        """Called when the run ends."""

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def name() -> str:
        raise NotImplementedError

    @staticmethod
    def is_available() -> bool:
        raise NotImplementedError

    @staticmethod
    def auto_device_count() -> int:
        raise NotImplementedError


class CPUAccelerator(Accelerator):
    """CPU processes (``devices`` counts processes)."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise ValueError(f"Device should be CPU, got {device} instead.")

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """Memory and CPU use from psutil, under Lightning's keys (its error where psutil is missing)."""
        from trainmesh.device_stats import get_cpu_stats

        return get_cpu_stats()

    @staticmethod
    def parse_devices(devices: int | str) -> int:
        """The number of CPU processes ``devices`` asks for (a positive int, or its string)."""
        count = int(devices) if isinstance(devices, str) and devices.strip().isdigit() else devices
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"devices={devices!r}: on CPU give a positive number of processes")
        return count

    @staticmethod
    def get_parallel_devices(devices: int | str) -> list[torch.device]:
        return [torch.device("cpu")] * CPUAccelerator.parse_devices(devices)

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def name() -> str:
        return "cpu"


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs, one process each."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"Device should be GPU, got {device} instead")
        torch.cuda.set_device(device)

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return dict(torch.cuda.memory_stats(device))

    def teardown(self) -> None:
        torch.cuda.empty_cache()

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int] | None:
        """The GPU indices ``devices`` asks for (None for 0 GPUs, as Lightning)."""
        if devices in (0, "0", [], None):
            return None
        return _indices(devices, torch.cuda.device_count())

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device("cuda", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.device_count() > 0

    @staticmethod
    def name() -> str:
        return "cuda"


class MPSAccelerator(Accelerator):
    """Apple's Metal GPU (one device)."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "mps":
            raise ValueError(f"Device should be MPS, got {device} instead")

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The host's memory and CPU use from psutil, under Lightning's ``M1_*`` keys (its error where
        psutil is missing)."""
        from trainmesh.device_stats import get_mps_stats

        return get_mps_stats()

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int] | None:
        return _indices(devices, 1)

    @staticmethod
    def get_parallel_devices(devices: int | str | list[int]) -> list[torch.device]:
        return [torch.device("mps", i) for i in MPSAccelerator.parse_devices(devices) or []]

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        backend = getattr(torch.backends, "mps", None)
        return bool(backend is not None and backend.is_available())

    @staticmethod
    def name() -> str:
        return "mps"


def _indices(devices: int | str | list[int], available: int) -> list[int]:
    """GPU indices from a count (-1: all), a list, or their string ("2", "0,1")."""
    if isinstance(devices, str):
        text = devices.strip()
        devices = [int(p) for p in text.split(",") if p.strip()] if "," in text else int(text)
    if isinstance(devices, int):
        indices = list(range(available)) if devices == -1 else list(range(devices))
    else:
        indices = list(devices)
    if any(i < 0 or i >= available for i in indices):
        raise ValueError(f"devices={devices!r} asks for device(s) {indices}, but this machine has {available}")
    return indices


XLAAccelerator = refused_class(
    "XLAAccelerator",
    "TPUs (torch_xla) are not supported by trainmesh, which runs on CPU, CUDA and MPS; "
    "use accelerator='cpu', 'cuda' or 'mps'",
    module=__name__,
    # Lightning's static check answers without torch_xla too: False here (a program asks before choosing)
    members={"is_available": staticmethod(lambda: False)},
)

_NOT_HERE = "trainmesh runs on CPU, CUDA and MPS; use accelerator='cpu', 'cuda' or 'mps'"
TPUAccelerator = refused_class("TPUAccelerator", f"TPUs (torch_xla) are not supported; {_NOT_HERE}", module=__name__)
IPUAccelerator = refused_class("IPUAccelerator", f"Graphcore IPUs are not supported; {_NOT_HERE}", module=__name__)
HPUAccelerator = refused_class("HPUAccelerator", f"Habana HPUs are not supported; {_NOT_HERE}", module=__name__)


def call_register_accelerators(*args: Any, **kwargs: Any) -> None:
    """Lightning 1.x's accelerator registry filler: trainmesh has no registry of accelerators."""
    raise RefusedError(f"call_register_accelerators: {call_register_accelerators.__refused__}")  # type: ignore[attr-defined]


call_register_accelerators.__refused__ = (  # type: ignore[attr-defined]
    "trainmesh has no accelerator registry to add to: its accelerators are CPU, CUDA and MPS; "
    "pass accelerator='cpu' / 'cuda' / 'mps' or an Accelerator object"
)

# The device type each of trainmesh's accelerator classes stands for (a user's subclass included).
_DEVICE_TYPES = ((CUDAAccelerator, "cuda"), (MPSAccelerator, "mps"), (CPUAccelerator, "cpu"))


def accelerator_name(accelerator: Any) -> Any:
    """``accelerator`` as ``Trainer(accelerator=...)``'s string: an Accelerator object becomes its
    device type; anything else is returned as given."""
    if not isinstance(accelerator, Accelerator):
        return accelerator
    for cls, device_type in _DEVICE_TYPES:
        if isinstance(accelerator, cls):
            return device_type
    raise ValueError(
        f"accelerator={type(accelerator).__name__}(): trainmesh places models on CPU, CUDA and MPS only; "
        "subclass CPUAccelerator, CUDAAccelerator or MPSAccelerator, or pass accelerator='cpu' / 'cuda' / 'mps'"
    )


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The first ``num_devices`` CUDA devices (all for -1) a tensor can be placed on: a GPU in
    exclusive mode taken by another process is skipped (Lightning's function, its messages)."""
    if num_devices == 0:
        return []
    visible = list(range(torch.cuda.device_count()))
    if not visible:
        raise ValueError(
            f"You requested to find {num_devices} devices but there are no visible CUDA devices on this machine."
        )
    if num_devices > len(visible):
        raise ValueError(f"You requested to find {num_devices} devices but this machine only has {len(visible)} GPUs.")
    available: list[int] = []
    unavailable: list[int] = []
    for index in visible:
        try:
            torch.tensor(0, device=torch.device("cuda", index))
        except RuntimeError:
            unavailable.append(index)
            continue
        available.append(index)
        if len(available) == num_devices:
            break
    if num_devices != -1 and len(available) != num_devices:
        raise RuntimeError(
            f"You requested to find {num_devices} devices but only {len(available)} are currently available."
            f" The devices {unavailable} are occupied by other processes and can't be used at the moment."
        )
    return available
