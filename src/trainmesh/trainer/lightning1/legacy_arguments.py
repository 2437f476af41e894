"""The Trainer arguments of the Lightning 1.x documents our users come from, mapped to today's.

``Trainer(gpus=2, accelerator="dp")`` in Lightning 1.x means ``Trainer(accelerator="cuda",
devices=2, strategy="dp")``. Each old spelling works and prints one line with the new one.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.refusal import LightningOneName

# Lightning 1.x put the strategy in `accelerator` (and earlier in `distributed_backend`).
_STRATEGY_NAMES = {"dp", "ddp", "ddp2", "ddp_spawn", "ddp_fork", "ddp_cpu"}

# The Trainer arguments only Lightning 1.x spells, with their defaults: still accepted, but a config
# written today (the CLI's --print_config) holds their translation instead.
OLD_ARGUMENTS: dict[str, Any] = {
    "gpus": None,
    "distributed_backend": None,
    "weights_summary": "top",
    "num_tpu_cores": None,
}


class LegacyArgumentNotice(LightningOneName):
    """An old Trainer spelling was translated; the message gives today's. A deprecation warning, as
    pytorch-lightning 1.9.5's for ``gpus=``: a program's filter on deprecations reaches it."""


@dataclass
class Translated:
    accelerator: Any
    devices: Any
    strategy: Any
    enable_model_summary: bool


def in_todays_spelling(settings: Mapping[str, Any], *, check_cuda: bool = True) -> dict[str, Any]:
    """The Trainer arguments to replace in ``settings`` so that it holds no old spelling (with notices).

    >>> old = {"accelerator": "ddp", "devices": 2, "strategy": "auto", "enable_model_summary": True, **OLD_ARGUMENTS}
    >>> new = in_todays_spelling(old)  # notice: accelerator='ddp' is Lightning 1.x's spelling; today: strategy='ddp'
    >>> new["accelerator"], new["strategy"]
    ('auto', 'ddp')
    """
    names = ("accelerator", "devices", "strategy", "enable_model_summary", *OLD_ARGUMENTS)
    translated = translate(**{name: settings[name] for name in names}, check_cuda=check_cuda)
    return {**asdict(translated), **OLD_ARGUMENTS}


def translate(
    *,
    accelerator: Any,
    devices: Any,
    strategy: Any,
    enable_model_summary: bool,
    gpus: Any,
    distributed_backend: str | None,
    weights_summary: Any,
    num_tpu_cores: int | None,
    check_cuda: bool = True,
) -> Translated:
    """Today's settings for a mix of old and new spellings (old ones print a notice).

    ``check_cuda=False`` translates ``gpus=2`` on a machine without CUDA too (for a config to
    run elsewhere) instead of stopping with an error.
    """
    out = Translated(accelerator, devices, strategy, enable_model_summary)
    if num_tpu_cores is not None:
        _tpu_error(num_tpu_cores)
    if isinstance(accelerator, str) and accelerator.lower() in _STRATEGY_NAMES:
        name = "ddp" if accelerator.lower() == "ddp_cpu" else accelerator.lower()
        _notice(f"accelerator={accelerator!r} is Lightning 1.x's spelling; today: strategy={name!r}")
        out.strategy, out.accelerator = name, "auto"
    if distributed_backend is not None:
        _notice(
            f"distributed_backend={distributed_backend!r} is Lightning 1.x's spelling; today: strategy={distributed_backend!r}"
        )
        out.strategy = distributed_backend
    if gpus is not None:
        given, gpus = gpus, _parse_gpus(gpus)
        count = len(gpus) if isinstance(gpus, (list, tuple)) else (gpus if gpus >= 0 else torch.cuda.device_count())
        if (count or gpus == -1) and check_cuda and not torch.cuda.is_available():
            raise MisconfiguredValue(  # 1.9.5's type, and ValueError as before
                f"gpus={given!r} asks for CUDA devices, but no CUDA device is visible to torch on this "
                f"machine. To run on CPU: Trainer(accelerator='cpu', devices={count or 1}, "
                f"strategy={out.strategy!r}) (dp and ddp run on CPU too)"
            )
        # Lightning 1.x ran gpus=0 (and gpus=[]) on one CPU process: the notice names what runs.
        out.accelerator, out.devices = ("cuda", gpus) if count else ("cpu", 1)
        _notice(
            f"gpus={given!r} is Lightning 1.x's spelling; today: accelerator={out.accelerator!r}, "
            f"devices={out.devices!r}"
        )
    if weights_summary != "top":
        _notice(
            f"weights_summary={weights_summary!r} is Lightning 1.x's spelling; today: "
            f"enable_model_summary={weights_summary is not None}"
        )
        out.enable_model_summary = weights_summary is not None
    return out


def _parse_gpus(gpus: Any) -> int | list[int]:
    """Lightning 1.x's ``gpus``: a count (2, "2", -1 or "-1" for all), or device indices
    ([0, 1], "0,1", "1,")."""
    if isinstance(gpus, bool) or not isinstance(gpus, (int, str, list, tuple)):
        raise ValueError(f"gpus={gpus!r}: give a number of GPUs (2), -1 for all, or their indices ([0, 1] or '0,1')")
    if not isinstance(gpus, str):
        return list(gpus) if isinstance(gpus, tuple) else gpus
    text = gpus.strip()
    try:
        if "," in text:
            return [int(part) for part in text.split(",") if part.strip()]
        return int(text)
    except ValueError:
        raise ValueError(
            f"gpus={gpus!r} is neither a number of GPUs ('2', '-1' for all) nor a list of indices ('0,1'); "
            "today's spelling is accelerator='cuda', devices=2 (or devices=[0, 1])"
        ) from None


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
    warnings.warn(message, LegacyArgumentNotice, stacklevel=4)
