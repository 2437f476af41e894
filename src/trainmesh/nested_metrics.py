"""pytorch-lightning 1.x's nested metric: ``self.log("training", {"train_loss": t, "n": 2.0})`` from a module
written for 1.x (``model_configuration.is_lightning1_module``) logs one metric whose value is a dict, as 1.9.5's
``_ResultMetricCollection``: each key reduced as a metric of its own (on_step, on_epoch, sync_dist alike), handed
out under the name (``training``, ``training_step``, ``training_epoch``) as a dict of the keys' values in
``callback_metrics``, ``logged_metrics``, the progress bar and the loggers (a csv cell reads
``{'train_loss': 0.57, 'n': 2.0}``). Lightning 2.x refuses dict values (``metric_values.as_scalar``).

``log_nested`` logs each key as an entry of its own under ``nested_name``; ``nest`` folds them back into
dicts where the metrics leave the loop (``publishing``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmesh.model_configuration import is_lightning1_module, lightning1_value
from trainmesh.module_host import TRAINER_HOST

# Between the name and the key, and after the key, so that the suffixes the loop appends to a name
# (``_step``, ``_epoch``, ``/dataloader_idx_N``) stay apart from the key: ``training\x1etrain_loss\x1e_step``.
SEPARATOR = "\x1e"


def nested_name(name: str, key: Any) -> str:
    """The name the log collector keeps ``key`` of the dict logged as ``name`` under."""
    return f"{name}{SEPARATOR}{key}{SEPARATOR}"


def log_nested(module: Any, name: str, value: Mapping[str, Any], options: dict[str, Any]) -> None:
    """``module.log(name, value, **options)`` of a dict: each key logged as a metric of its own where ``module``
    was written for 1.x and runs under a Trainer; a 2.x module's dict goes on to 2.x's refusal
    (``metric_values.as_scalar``)."""
    if module._host is not TRAINER_HOST or not is_lightning1_module(module):  # (Fabric's log takes dicts as they are)
        return module._host.log(module, name, value, options)
    for key, each in value.items():  # (the host takes options apart: a copy for each key)
        module._host.log(module, nested_name(name, key), lightning1_value(module, name, each), dict(options))


def nest(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with each nested metric's keys folded into one dict under its name (the name and suffix
    around the key), where the name first appears; ``metrics`` itself where nothing is nested (2.x modules)."""
    if not any(SEPARATOR in name for name in metrics):
        return metrics
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if SEPARATOR in name:
            outer, key, suffix = name.split(SEPARATOR, 2)
            out.setdefault(outer + suffix, {})[key] = value
        else:
            out[name] = value
    return out


def nest_results(results: dict[str, float]) -> dict[str, Any]:
    """What ``trainer.validate`` / ``test`` return for one loader, nested: 1.9.5 hands a nested metric out as a
    dict of tensors (``{'val': {'loss': tensor(2.5690)}}``) where a plain one is a float."""
    import torch

    nested = nest(results)
    if nested is results:
        return results
    return {
        name: {key: torch.tensor(each) for key, each in value.items()} if isinstance(value, dict) else value
        for name, value in nested.items()
    }


def refuse_nested_monitor(callback: str, monitor: str | None, value: Any, error: type[Exception]) -> None:
    """A callback monitoring a nested metric: 1.9.5 fails comparing it (ModelCheckpoint's ``TypeError`` at the
    second save, EarlyStopping's ``AttributeError`` at the first check); here the same type, saying what to do."""
    if isinstance(value, dict):
        raise error(
            f"{callback}(monitor={monitor!r}) monitors a nested metric (`self.log({monitor!r}, dict)` from a "
            f"pytorch-lightning 1.x module: its value is the dict {value!r}), which cannot be compared "
            "(pytorch-lightning 1.9.5 fails on it too). Log the value to monitor under a name of its own "
            "(self.log('train_loss', loss)) and monitor that name."
        )
