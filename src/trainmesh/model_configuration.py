"""A model's ``configure_model`` run outside the Trainer's placement: with the mesh where the model
takes one, and ahead of the run on the meta device for "auto"'s memory estimate.

Below the Runtime, the Trainer and the Module (it imports only the hooks' defaults), so that each of
them calls it without an import running back up (tests/test_architecture.py: the layers).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch import nn

from trainmesh.module_hooks import ModelHooks
from trainmesh.utilities.rank_zero import WarningCache


def built_for_estimate(module: nn.Module) -> tuple[nn.Module, bool]:
    """The model whose memory "auto" estimates, and whether it was built on the meta device.

    For ``strategy="auto"``: a module that builds its layers in ``configure_model`` has few or
    no parameters yet when "auto" decides (before the processes start): estimated as given, it
    would always look small enough for ddp. Its layers are built here on a copy, on the meta device (no memory, no
    initialisation), exactly as a sharding strategy would build them, without a mesh.
    """
    if not configure_model_is_a_hook(module):
        return module, False
    probe = copy.deepcopy(module)
    try:
        with torch.device("meta"):
            call_configure_model(probe, None)
    except Exception as error:
        raise ValueError(
            f'strategy="auto" decides by the model\'s memory, and {type(module).__name__} builds its layers in '
            f"configure_model, which failed when run ahead on the meta device without a mesh "
            f"({type(error).__name__}: {error}). Name the strategy instead (e.g. strategy='fsdp' or 'ddp')"
        ) from error
    return probe, True


# Lightning 2.0 removed these module hooks (2.6 refuses them): a module that defines one was written for
# pytorch-lightning 1.x, which had no ``configure_model`` hook (Lightning 2.1 added it). There a method of
# that name is the program's own (a ``self.configure_model()`` called in ``__init__``, say), which 1.9.5
# never calls: called again by the Trainer it would build the layers anew, dropping the weights already
# there and drawing from the random generator. (Its 1.x name, ``configure_sharded_model``, is called.)
_LIGHTNING1_ONLY_HOOKS = (
    "training_step_end",
    "validation_step_end",
    "test_step_end",
    "training_epoch_end",
    "validation_epoch_end",
    "test_epoch_end",
)


def configure_model_is_a_hook(module: Any) -> bool:
    """Whether ``module``'s class overrides Lightning's ``configure_model`` hook: False for a module of
    Lightning 1.x (one defining a hook 2.0 removed), where that name was no hook.

    >>> configure_model_is_a_hook(nn.Linear(1, 1))
    False
    """
    if not _overrides(module, "configure_model"):
        return False
    return not is_lightning1_module(module)


def is_lightning1_module(module: Any) -> bool:
    """Whether ``module`` was written for pytorch-lightning 1.x: its class defines a hook Lightning 2.0 removed."""
    return any(_overrides(module, hook) for hook in _LIGHTNING1_ONLY_HOOKS)


def _overrides(module: Any, hook: str) -> bool:
    found = getattr(type(module), hook, None)
    return found is not None and found is not getattr(ModelHooks, hook, None)


def call_configure_model(module: Any, mesh: Any) -> None:
    """``module.configure_model(mesh)``, or ``configure_model()`` when it takes no argument."""
    if configure_model_takes_mesh(module):
        module.configure_model(mesh)
    else:
        module.configure_model()


def configure_model_takes_mesh(module: Any) -> bool:
    """Whether ``module.configure_model`` takes trainmesh's mesh argument (Lightning's hook takes none)."""
    try:
        return len(inspect.signature(module.configure_model).parameters) >= 1
    except (TypeError, ValueError):
        return False


def lightning1_number(module: Any, value: float) -> Any:
    """A NumPy float64 (a ``float`` subclass: ``np.corrcoef(...)[0, 1]``, ``scipy.stats.spearmanr(...)[0]``)
    given to ``self.log``. Lightning 2.x logs every number in the default dtype (float32);
    pytorch-lightning 1.9.5 made it ``torch.tensor(value)``, which keeps NumPy's float64, so its logged
    values, ``callback_metrics`` and a checkpoint's ``best_model_score`` kept every digit. A 1.x module
    (:func:`is_lightning1_module`) gets 1.9.5's: a float64 tensor."""
    return torch.tensor(value) if hasattr(value, "dtype") and is_lightning1_module(module) else value


# Once per name and hook, as 1.9.5's module-level warning cache in its result.py.
_LIGHTNING1_WARNINGS = WarningCache()


def lightning1_integer(module: Any, name: str, value: Any) -> Any:
    """An integer or bool given to a 1.x module's ``self.log`` (:func:`is_lightning1_module`), a Python one
    too, which pytorch-lightning 1.9.5 made an int64 tensor: 1.9.5's warning, in its words, once per name
    and hook, and the value in the default dtype, as 1.9.5 converted it. (Lightning 2.6 logs a Python
    number as a float silently and says other words for a tensor: trainer/results.py.)"""
    collector = getattr(module, "_log_collector", None)
    if collector is None or not is_lightning1_module(module):
        return value
    dtype = torch.get_default_dtype()
    _LIGHTNING1_WARNINGS.warn(
        f"You called `self.log({name!r}, ...)` in your `{collector.fx}` but the value needs to"
        f" be floating point. Converting it to {dtype}."
    )
    return torch.as_tensor(value).to(dtype)


def lightning1_value(module: Any, name: str, value: Any) -> Any:
    """A value given to ``self.log`` as pytorch-lightning 1.9.5 took it from a 1.x module (a NumPy float64
    kept, an integer made float with 1.9.5's words); any other value, and any 2.x module's, unchanged."""
    if type(value) is not float and isinstance(value, float):  # NumPy's float64: 1.9.5 kept its dtype
        return lightning1_number(module, value)
    if type(value) in (int, bool) or (isinstance(value, torch.Tensor) and not value.is_floating_point()):
        return lightning1_integer(module, name, value)
    return value
