"""The Trainer arguments of the Lightning 1.x documents our users come from, mapped to today's.

``Trainer(gpus=2, accelerator="dp")`` from the seeds means ``Trainer(accelerator="cuda",
devices=2, strategy="dp")``. Each old spelling works and prints one line with the new one.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Any

import torch

# Lightning 1.x put the strategy in `accelerator` (and earlier in `distributed_backend`).
_STRATEGY_NAMES = {"dp", "ddp", "ddp2", "ddp_spawn", "ddp_fork", "ddp_cpu"}


class SeedSpellingNotice(UserWarning):
    """An old Trainer spelling was translated; the message gives today's."""


@dataclass
class Translated:
    accelerator: Any
    devices: Any
    strategy: Any
    enable_model_summary: bool


def translate(*, accelerator: Any, devices: Any, strategy: Any, enable_model_summary: bool, gpus: Any,
              distributed_backend: str | None, weights_summary: Any, num_tpu_cores: int | None) -> Translated:
    """Today's settings for a mix of old and new spellings (old ones print a notice)."""
    out = Translated(accelerator, devices, strategy, enable_model_summary)
    if num_tpu_cores is not None:
        _tpu_error(num_tpu_cores)
    if isinstance(accelerator, str) and accelerator.lower() in _STRATEGY_NAMES:
        name = "ddp" if accelerator.lower() == "ddp_cpu" else accelerator.lower()
        _notice(f"accelerator={accelerator!r} is Lightning 1.x's spelling; today: strategy={name!r}")
        out.strategy, out.accelerator = name, "auto"
    if distributed_backend is not None:
        _notice(f"distributed_backend={distributed_backend!r} is Lightning 1.x's spelling; today: strategy={distributed_backend!r}")
        out.strategy = distributed_backend
    if gpus is not None:
        count = len(gpus) if isinstance(gpus, (list, tuple)) else int(gpus)
        if count and not torch.cuda.is_available():
            raise ValueError(
                f"gpus={gpus!r} asks for CUDA devices, but no CUDA device is visible to torch on this "
                f"machine. To run on CPU: Trainer(accelerator='cpu', devices={count or 1}, "
                f"strategy={out.strategy!r}) (dp and ddp run on CPU too)"
            )
        _notice(f"gpus={gpus!r} is Lightning 1.x's spelling; today: accelerator='cuda', devices={gpus!r}")
        out.accelerator, out.devices = ("cuda", gpus) if count else ("cpu", 1)
    if weights_summary != "top":
        _notice(f"weights_summary={weights_summary!r} is Lightning 1.x's spelling; today: "
                f"enable_model_summary={weights_summary is not None}")
        out.enable_model_summary = weights_summary is not None
    return out


def _tpu_error(cores: int) -> None:
    if importlib.util.find_spec("torch_xla") is None:
        raise ValueError(
            f"num_tpu_cores={cores} asks for TPU cores, which need torch_xla (not installed here); "
            "trainmesh runs on CPU and CUDA: use accelerator='cpu' or 'cuda'"
        )
    raise ValueError(
        f"num_tpu_cores={cores}: torch_xla is installed, but trainmesh has no TPU strategy yet; "
        "use accelerator='cpu' or 'cuda'"
    )


def _notice(message: str) -> None:
    warnings.warn(message, SeedSpellingNotice, stacklevel=4)
