"""Turn the user's ``accelerator`` and ``devices`` settings into a device type and indices."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.lazy import lazy_attribute, lazy_dir
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.suggestions import did_you_mean

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and the import graph's checks
    from trainmesh.accelerator_types import (
        Accelerator,
        CPUAccelerator,
        CUDAAccelerator,
        HPUAccelerator,
        IPUAccelerator,
        MPSAccelerator,
        TPUAccelerator,
        XLAAccelerator,
        call_register_accelerators,
        find_usable_cuda_devices,
    )

# Lightning's accelerator names (lightning.pytorch.accelerators), defined in accelerator_types.py and
# imported on first use (PEP 562): a run given accelerator="cpu" (a string) does not import them.
_LAZY = {
    name: ("trainmesh.accelerator_types", name)
    for name in (
        "Accelerator",
        "CPUAccelerator",
        "CUDAAccelerator",
        "HPUAccelerator",
        "IPUAccelerator",
        "MPSAccelerator",
        "TPUAccelerator",
        "XLAAccelerator",
        "call_register_accelerators",
        "find_usable_cuda_devices",
    )
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name, submodules=False)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


__all__ = [
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "HPUAccelerator",
    "IPUAccelerator",
    "MPSAccelerator",
    "TPUAccelerator",
    "XLAAccelerator",
    "call_register_accelerators",
    "find_usable_cuda_devices",
    "resolve_accelerator",
    "resolve_devices",
]

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")
# Lightning's accelerator names (2.6 and 1.9.5's registries) for hardware trainmesh does not run on.
_OTHER_HARDWARE = {
    "tpu": "TPUs (torch_xla)",
    "xla": "XLA devices (torch_xla)",
    "hpu": "Habana HPUs",
    "ipu": "Graphcore IPUs",
}


def resolve_accelerator(accelerator: str | Accelerator) -> str:
    """ "auto" picks cuda, then mps, then cpu; "gpu" means cuda; an Accelerator object stands for
    its device type (accelerator_types.py). Returns a torch device type."""
    if not isinstance(accelerator, str):  # an Accelerator object: its class's module is imported already
        from trainmesh.accelerator_types import accelerator_name

        accelerator = accelerator_name(accelerator)
    if isinstance(accelerator, str) and accelerator.lower() in _OTHER_HARDWARE:
        raise ValueError(
            f"accelerator={accelerator!r} is Lightning's, but {_OTHER_HARDWARE[accelerator.lower()]} are not supported "
            "by trainmesh; use accelerator='cuda', 'mps' or 'cpu'"
        )
    if not isinstance(accelerator, str) or accelerator.lower() not in ACCELERATORS:
        raise ValueError(
            f"accelerator={accelerator!r} is not known; choose one of {', '.join(ACCELERATORS)}."
            + did_you_mean(accelerator, ACCELERATORS)
        )
    name = accelerator.lower()
    if name == "gpu":
        name = "cuda"
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if _mps_available():
            return "mps"
        return "cpu"
    # Lightning (1.9.5 and 2.6) raises MisconfigurationException here: caught by that name or ValueError
    if name == "cuda" and not torch.cuda.is_available():
        raise MisconfiguredValue(
            "accelerator='cuda' was asked for but no CUDA device is visible to torch "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}); "
            "run on CPU with accelerator='cpu', or check CUDA_VISIBLE_DEVICES and the driver"
        )
    if name == "mps" and not _mps_available():
        raise MisconfiguredValue("accelerator='mps' was asked for but this machine has no MPS device; use 'cpu'")
    return name


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def device_count(device_type: str) -> int | None:
    """How many devices of this type exist; None for CPU, where processes are not limited."""
    if device_type == "cuda":
        return torch.cuda.device_count()
    if device_type == "mps":
        return 1
    return None


def resolve_devices(device_type: str, devices: int | str | list[int] | tuple[int, ...]) -> list[int]:
    """The device indices this process group uses on one node.

    ``devices`` is "auto" (every GPU, or one CPU process), a count, a list of indices, or a
    string of either ("2", "0,1", "-1" for all).
    """
    available = device_count(device_type)
    parsed = _parse_devices(devices)
    if parsed == "auto":
        return list(range(available if available else 1))
    if parsed == -1:
        if available is None:
            raise ValueError("devices=-1 (all devices) needs a GPU accelerator; on CPU give a process count")
        return list(range(available))
    if isinstance(parsed, int):
        if parsed < 1:
            raise ValueError(f"devices={devices!r} must be at least 1 (or 'auto' / -1 for all)")
        indices = list(range(parsed))
    else:
        assert not isinstance(parsed, str)  # "auto" is the one string _parse_devices returns
        indices = list(parsed)
        if len(set(indices)) != len(indices) or any(i < 0 for i in indices):
            raise ValueError(f"devices={devices!r} lists a device twice or a negative index")
    if available is not None and (not indices or max(indices) >= available):
        raise ValueError(
            f"devices={devices!r} asks for {device_type} device(s) {indices} but this machine has "
            f"{available} {device_type} device(s); ask for at most {available}"
            + (", or use accelerator='cpu'" if device_type != "cpu" else "")
        )
    if device_type == "cpu":
        check_cpu_processes(len(indices))
    return indices


# More CPU processes per node than this many times the logical cores is refused: each would get
# a sliver of a core, and the run would crawl (or exhaust memory) rather than train.
CPU_OVERSUBSCRIPTION_LIMIT = 4
# How the warning for more CPU processes than physical cores starts (a warnings filter's pattern)
OVERSUBSCRIBED_CPU_WARNING = r"devices=\d+ on CPU starts \d+ processes on this node"


def check_cpu_processes(processes: int) -> None:
    """Warn when ``processes`` CPU processes on this node outnumber its physical cores; refuse far beyond.

    Runs where the devices are resolved, before any process starts.
    """
    if processes <= 1:
        return  # one process fits any node: no core count to read (each fit would read /proc/cpuinfo)
    logical = logical_cpu_count()
    if processes > CPU_OVERSUBSCRIPTION_LIMIT * logical:
        raise ValueError(
            f"devices={processes} on CPU would start {processes} processes on this node, but it has only "
            f"{logical} logical CPU core(s) (more than {CPU_OVERSUBSCRIPTION_LIMIT}x oversubscribed). Use fewer "
            f"devices: at most {physical_cpu_count()} (one process per physical core) for speed, and no more "
            f"than {CPU_OVERSUBSCRIPTION_LIMIT * logical}; for more processes use more nodes (num_nodes)"
        )
    physical = physical_cpu_count()
    if processes > physical:
        rank_zero_warn(
            f"devices={processes} on CPU starts {processes} processes on this node, which has {physical} physical "
            f"CPU core(s) ({logical} logical): each process gets about {physical / processes:.2g} of a core, and "
            f"training is slower than with devices={physical} or fewer",
            stacklevel=3,
        )


def logical_cpu_count() -> int:
    """The logical CPUs this process may run on (its affinity set where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def physical_cpu_count() -> int:
    """Physical cores (psutil if installed, else /proc/cpuinfo), at most the logical CPUs usable."""
    logical = logical_cpu_count()
    physical = _psutil_physical_cores()
    if not physical:
        physical = _physical_cores_from_cpuinfo()
    return max(1, min(physical or logical, logical))


@functools.lru_cache(maxsize=1)
def _psutil_physical_cores() -> int | None:
    """psutil's physical core count; None where psutil is not installed or cannot tell. Asked
    once per process: a missing psutil is a failed import (a search of sys.path) per ask."""
    try:
        import psutil

        physical: int | None = psutil.cpu_count(logical=False)
        return physical
    except Exception:  # not installed, or it could not tell
        return None


def _physical_cores_from_cpuinfo(path: str = "/proc/cpuinfo") -> int | None:
    """Distinct (physical id, core id) pairs in ``path``; None where it lists no core ids (e.g. ARM)."""
    if path == "/proc/cpuinfo":
        return _node_cpuinfo_cores()
    return _read_cpuinfo_cores(path)


@functools.lru_cache(maxsize=1)
def _node_cpuinfo_cores() -> int | None:
    """This node's cores from /proc/cpuinfo, read once per process (the cores do not change)."""
    return _read_cpuinfo_cores("/proc/cpuinfo")


def _read_cpuinfo_cores(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    cores = set()
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "core id" in fields:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores) or None


def _parse_devices(devices: object) -> int | str | list[int]:
    if isinstance(devices, bool):
        raise ValueError(f"devices={devices!r}: give a count, a list of indices or 'auto'")
    if isinstance(devices, int):
        return devices
    if isinstance(devices, (list, tuple)):
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ValueError(f"devices={devices!r}: a list of devices must hold integer indices")
        return list(devices)
    if isinstance(devices, str):
        text = devices.strip().lower()
        if text == "auto":
            return "auto"
        try:
            if "," in text:
                return [int(part) for part in text.split(",") if part.strip()]
            return int(text)
        except ValueError:
            pass
    message = f"devices={devices!r} is not understood: give a count (2), indices ([0, 1] or '0,1'), -1 or 'auto'"
    if not isinstance(devices, str):
        raise DevicesTypeError(message)  # a value of another type: a TypeError, as Lightning 2.6 raises
    raise ValueError(message)


class DevicesTypeError(TypeError, ValueError):
    """``devices=`` of a type no Trainer takes (None, a float): a TypeError as Lightning's, and a
    ValueError as trainmesh's other ``devices`` errors."""


def device_for(device_type: str, index: int) -> torch.device:
    return torch.device("cpu") if device_type == "cpu" else torch.device(device_type, index)
