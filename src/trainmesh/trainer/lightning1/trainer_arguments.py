"""Lightning 1.x's Trainer arguments that 2.x removed, other than the old spellings of today's
(``gpus``, ``distributed_backend``, ...: ``trainer/legacy_arguments.py``): ``auto_select_gpus=True``
(the GPUs a tensor can be placed on: ``find_usable_cuda_devices``), ``num_processes`` (CPU
processes), ``amp_backend="native"``; what trainmesh cannot do is refused with the reason:
``tpu_cores``, ``ipus``, Apex (``amp_backend="apex"``, ``amp_level``), and the features 1.x built into
the Trainer that trainmesh has not; ``replace_sampler_ddp=False`` is today's
``use_distributed_sampler=False``. Each value 1.x took by default is accepted; ``auto_lr_find`` / ``auto_scale_batch_size`` run in ``trainer.tune`` (trainer_members.py,
tune.py), ``track_grad_norm`` in grad_norm.py.
"""

from __future__ import annotations

import warnings
from typing import Any

from trainmesh.utilities.refusal import LightningOneName

# The Trainer arguments refused here, with the reason (the inventory of Lightning's API lists them so).
REFUSED_ARGUMENTS = {
    "tpu_cores": "TPUs (torch_xla) are not supported by trainmesh, which runs on CPU and CUDA; "
    "use accelerator='cpu' or 'cuda' with devices=N",
    "ipus": "Graphcore IPUs are not supported by trainmesh, which runs on CPU and CUDA; "
    "use accelerator='cpu' or 'cuda' with devices=N",
}
# 1.x's arguments the Trainer takes for this module, with 1.x's defaults (accepted as they are).
LIGHTNING1_ARGUMENTS: dict[str, Any] = {
    "auto_select_gpus": False,
    "tpu_cores": None,
    "ipus": None,
    "num_processes": None,
    "amp_backend": None,
    "amp_level": None,
    "auto_lr_find": False,
    "auto_scale_batch_size": False,
    "track_grad_norm": -1,
    "replace_sampler_ddp": True,
}
# A value other than the default stops with this reason.
_NOT_HERE = {
    "amp_level": "Apex's optimization levels are not supported; precision='16-mixed' is torch's native AMP",
}


def hardware_arguments(settings: dict[str, Any], *, gpus: Any, accelerator: Any, devices: Any) -> tuple[Any, Any, Any]:
    """(gpus, accelerator, devices) after 1.x's removed arguments in ``settings`` (notices for
    what changes, a ValueError for what trainmesh cannot do)."""
    given = {name: settings.get(name, default) for name, default in LIGHTNING1_ARGUMENTS.items()}
    for name, value in given.items():
        if name in REFUSED_ARGUMENTS and value is not None:
            raise ValueError(f"Trainer({name}={value!r}): {REFUSED_ARGUMENTS[name]}")
        if name in _NOT_HERE and value != LIGHTNING1_ARGUMENTS[name]:
            raise ValueError(f"Trainer({name}={value!r}): {_NOT_HERE[name]}")
    if given["amp_backend"] not in (None, "native"):
        raise ValueError(
            f"Trainer(amp_backend={given['amp_backend']!r}): NVIDIA Apex is not supported; "
            "precision='16-mixed' is torch's native AMP (amp_backend='native')"
        )
    if given["amp_backend"] == "native":
        _notice("amp_backend='native' is Lightning 1.x's spelling; today: leave it out (torch's AMP is the only one)")
    # 1.x's defaults were None: the accelerator chosen as "auto" and all of its devices (1.9.5's
    # auto_device_count(): one on CPU), what "auto" chooses today.
    for name, value in (("accelerator", accelerator), ("devices", devices)):
        if value is None:
            _notice(f"{name}=None is Lightning 1.x's default; today: {name}='auto'")
    accelerator, devices = ("auto" if accelerator is None else accelerator), ("auto" if devices is None else devices)
    if given["num_processes"] is not None:  # 1.9.5: CPU processes, one included
        if devices not in ("auto", None):
            raise ValueError(f"Trainer(num_processes={given['num_processes']}, devices={devices!r}): give one of them")
        accelerator, devices = "cpu", given["num_processes"]
        _notice(f"num_processes={devices} is Lightning 1.x's spelling; today: accelerator='cpu', devices={devices}")
    if given["auto_select_gpus"] and isinstance(gpus, int) and gpus != 0:
        from trainmesh.accelerators import find_usable_cuda_devices  # 1.x's auto_select_gpus only

        chosen = find_usable_cuda_devices(gpus)
        _notice(
            f"auto_select_gpus=True is Lightning 1.x's spelling; today: devices=find_usable_cuda_devices({gpus}) "
            f"(here {chosen})"
        )
        gpus = chosen  # 1.x selected nothing for a list of indices or no GPUs
    elif given["auto_select_gpus"]:  # 1.9.5 warns its deprecation whatever it then selects
        _notice(
            "auto_select_gpus=True is Lightning 1.x's (deprecated in 1.9); today: devices=find_usable_cuda_devices(N)"
        )
    return gpus, accelerator, devices


def accumulation_argument(callbacks: Any, accumulate_grad_batches: Any) -> tuple[Any, dict[int, int] | None]:
    """1.x's ``accumulate_grad_batches={epoch: factor}`` (2.0 took only an int) is 1.9.5's
    ``GradientAccumulationScheduler(that dict)``, listed by the Trainer (accumulation.py): the factor for
    epoch 0 and the dict; with such a callback given as well, 1.9.5's error. An int: itself, None."""
    if not isinstance(accumulate_grad_batches, dict):
        return accumulate_grad_batches, None
    from trainmesh.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
    from trainmesh.utilities.exceptions import MisconfigurationException

    given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if any(isinstance(callback, GradientAccumulationScheduler) for callback in given):
        raise MisconfigurationException(
            "You have set both `accumulate_grad_batches` and passed an instance of `GradientAccumulationScheduler` "
            "inside callbacks. Either remove `accumulate_grad_batches` from trainer or remove "
            "`GradientAccumulationScheduler` from callbacks list."
        )
    _notice(
        f"accumulate_grad_batches={accumulate_grad_batches!r} is Lightning 1.x's spelling; today: "
        f"callbacks=[GradientAccumulationScheduler({accumulate_grad_batches!r})]"
    )
    # its checks (keys, factors) and its factor for epoch 0, as 1.9.5's Trainer reads it
    scheduling = dict(accumulate_grad_batches)
    return GradientAccumulationScheduler(scheduling).get_accumulate_grad_batches(0), scheduling


def strategy_argument(strategy: Any) -> Any:
    """1.x's default ``strategy=None`` (its accelerator connector chose; programs pass it, as in
    ``strategy="ddp" if devices > 1 else None``) is today's ``"auto"``."""
    if strategy is None:
        _notice("strategy=None is Lightning 1.x's default; today: strategy='auto'")
        return "auto"
    return strategy


def distributed_sampler(replace_sampler_ddp: bool, use_distributed_sampler: bool) -> bool:
    """``use_distributed_sampler`` after 1.x's ``replace_sampler_ddp`` (its name until 2.0): False from
    either leaves each loader's sampler as given."""
    if replace_sampler_ddp:
        return use_distributed_sampler
    _notice("replace_sampler_ddp=False is Lightning 1.x's spelling; today: use_distributed_sampler=False")
    return False


def resume_notice(path: Any) -> None:
    """1.9.5's deprecation line for ``Trainer(resume_from_checkpoint=path)`` (given, not None)."""
    if path is not None:
        _notice(
            f"resume_from_checkpoint={path!r} is Lightning 1.x's spelling; today: trainer.fit(model, ckpt_path=...)"
        )


def _notice(message: str) -> None:
    warnings.warn(
        message, LightningOneName, stacklevel=7
    )  # past the constructor and its two wrappers (barebones, suggestions)
