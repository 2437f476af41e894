"""The checks ``Module.log`` makes before a value reaches the Trainer's log collector, as
Lightning's ``LightningModule.log`` makes them (2.6, ``core/module.py``): the ``reduce_fx``
spellings it takes, the torchmetrics ``Metric`` it can name, and its warnings when logging
cannot happen. Kept apart from :mod:`trainmesh.module` so that the module class stays small.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.exceptions import MisconfigurationException, MisconfiguredValue
from trainmesh.utilities.rank_zero import rank_zero_warn

REDUCE_FX_NAMES = {"mean", "sum", "max", "min"}
BAREBONES_LOG = (
    "You are trying to `self.log()` but `Trainer(barebones=True)` is configured."
    " Logging can impact raw speed so it is disabled under this setting."
)
_warned_names: set[str] = set()


def reduce_fx_name(reduce_fx: Any) -> str:
    """``reduce_fx`` as one of :data:`REDUCE_FX_NAMES`: Lightning's spellings (any case, "avg" for
    the mean, torch's or Python's functions)."""
    if isinstance(reduce_fx, str):
        name = "mean" if reduce_fx.lower() == "avg" else reduce_fx.lower()
    else:
        name = {torch.mean: "mean", torch.sum: "sum", sum: "sum", torch.max: "max", max: "max"}.get(reduce_fx, "")
        name = "min" if reduce_fx in (torch.min, min) else name
    if name not in REDUCE_FX_NAMES:  # Lightning's exception and words (2.6 and 1.9.5 alike), still a ValueError
        raise MisconfiguredValue(
            "Only `self.log(..., reduce_fx={min,max,mean,sum})` are supported."
            " If you need a custom reduction, please log a `torchmetrics.Metric` instance instead."
            f" Found: {reduce_fx}"
        )
    return name


NO_TRAINER_LOG = (
    "You are trying to `self.log()` but the `self.trainer` reference is not registered on the model yet."
    " This is most likely because the model hasn't been passed to the `Trainer`"
)


def warn_no_trainer(name: str, *, attached: bool, stacklevel: int = 3) -> None:
    """``self.log`` with nowhere to send the value: a module no Trainer holds says Lightning's words,
    from one place (Python's default filter shows it once a process, as Lightning's from its module.py)."""
    if not attached:
        rank_zero_warn(NO_TRAINER_LOG, stacklevel=1)
    elif name not in _warned_names:
        _warned_names.add(name)
        warnings.warn(
            f"self.log({name!r}, ...) called outside a Trainer run: the value is dropped",
            stacklevel=stacklevel,
        )


def warn_barebones() -> None:
    """Lightning's warning for ``self.log`` under ``Trainer(barebones=True)``, from one place: shown once
    a process (Python's default filter), as Lightning's, not once per line calling ``self.log``."""
    rank_zero_warn(BAREBONES_LOG, stacklevel=1)


def check_metric_attribute(module: nn.Module, name: str, value: Any, metric_attribute: str | None) -> None:
    """Lightning's refusal of a torchmetrics ``Metric`` logged without ``metric_attribute`` that is
    not one of the module's submodules: Lightning names a logged Metric by its attribute (to save
    and restore its state), so it raises ``MisconfigurationException`` with this text.

    Lightning finds the attributes once per module (its ``_metric_attributes`` cache); here they are
    looked up at each such call, which answers the same unless a Metric attribute is added later."""
    if metric_attribute is not None or not _is_torchmetrics_metric(value):
        return
    from torchmetrics import Metric

    attributes = {id(sub): sub_name for sub_name, sub in module.named_modules() if isinstance(sub, Metric)}
    if not attributes:
        raise MisconfigurationException(
            "Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged."
            " You can fix this by setting an attribute for the metric in your `LightningModule`."
        )
    if id(value) not in attributes:
        raise MisconfigurationException(
            "Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged."
            f" You can fix this by calling `self.log({name}, ..., metric_attribute=name)` where `name` is one"
            f" of {list(attributes.values())}"
        )


def _is_torchmetrics_metric(value: Any) -> bool:
    # torchmetrics stays optional: a Metric can only exist where it was imported.
    import sys

    module = sys.modules.get("torchmetrics")
    return module is not None and isinstance(value, module.Metric)
