"""Lightning's ``lightning.pytorch.accelerators.cuda`` path: ``CUDAAccelerator``, ``num_cuda_devices``
and ``get_nvidia_gpu_stats`` (what ``nvidia-smi`` reports for one device, as Lightning reads it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import torch

from trainmesh.accelerator_types import CUDAAccelerator

__all__ = ["CUDAAccelerator", "get_nvidia_gpu_stats", "is_cuda_available", "num_cuda_devices"]

# nvidia-smi's query fields and their units, in the order (and with the key names) Lightning returns them
_GPU_STATS = (
    ("utilization.gpu", "%"),
    ("memory.used", "MB"),
    ("memory.free", "MB"),
    ("utilization.memory", "%"),
    ("fan.speed", "%"),
    ("temperature.gpu", "°C"),
    ("temperature.memory", "°C"),
)


def num_cuda_devices() -> int:
    """How many CUDA devices this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def is_cuda_available() -> bool:
    """Fabric's ``lightning.fabric.accelerators.cuda.is_cuda_available``: whether torch sees a CUDA device."""
    return torch.cuda.is_available()


def get_nvidia_gpu_stats(device: Any) -> dict[str, float]:
    """``nvidia-smi``'s utilization, memory, fan and temperature figures for ``device``, keyed
    ``"<field> (<unit>)"``; a field the card does not report reads 0.0.

    Raises:
        FileNotFoundError: ``nvidia-smi`` is not on the PATH.
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise FileNotFoundError("nvidia-smi: command not found")
    index = torch.device(device).index if not isinstance(device, int) else device
    # nvidia-smi numbers the machine's cards; CUDA_VISIBLE_DEVICES may renumber them for this process
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    gpu_id = visible[index or 0].strip() if visible != [""] and len(visible) > (index or 0) else str(index or 0)
    query = ",".join(field for field, _ in _GPU_STATS)
    done = subprocess.run(
        [smi, f"--query-gpu={query}", "--format=csv,nounits,noheader", f"--id={gpu_id}"],
        encoding="utf-8",
        capture_output=True,
        check=True,
    )
    values = [_number(x) for x in done.stdout.strip().split(", ")]
    return {f"{field} ({unit})": value for (field, unit), value in zip(_GPU_STATS, values, strict=False)}


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]" on cards without that sensor
        return 0.0
