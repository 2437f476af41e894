"""Read what ``configure_optimizers`` returned into optimizers and scheduler configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_FORMS = (
    "an optimizer; a list of optimizers; ([optimizers], [schedulers]); "
    "{'optimizer': opt, 'lr_scheduler': sched or {'scheduler': sched, 'interval': 'step'|'epoch', "
    "'frequency': n, 'monitor': name}}; or a list of such dicts"
)


@dataclass
class SchedulerConfig:
    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None


def parse_optimizers(returned: Any, owner: str) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """Normalise every form Lightning users write into (optimizers, scheduler configs)."""
    if returned is None:
        raise TypeError(f"{owner}.configure_optimizers() returned None; return {_FORMS}")
    if isinstance(returned, torch.optim.Optimizer):
        return [returned], []
    if isinstance(returned, (str, bytes)):
        raise TypeError(f"{owner}.configure_optimizers() returned {type(returned).__name__}; return {_FORMS}")
    if isinstance(returned, Mapping):
        return _from_dicts([returned], owner)
    if isinstance(returned, tuple) and len(returned) == 2 and all(isinstance(x, (list, tuple)) for x in returned):
        optimizers = _check_optimizers(list(returned[0]), owner)
        return optimizers, [_scheduler_config(s, owner) for s in returned[1]]
    if isinstance(returned, Sequence) and returned and all(isinstance(x, Mapping) for x in returned):
        return _from_dicts(list(returned), owner)
    if isinstance(returned, Sequence) and returned:
        return _check_optimizers(list(returned), owner), []
    raise TypeError(f"{owner}.configure_optimizers() returned {type(returned).__name__}; return {_FORMS}")


def _from_dicts(
    dicts: list[Mapping[str, Any]], owner: str
) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    optimizers, schedulers = [], []
    for entry in dicts:
        if "optimizer" not in entry:
            raise TypeError(
                f"{owner}.configure_optimizers() returned a dict without 'optimizer' (keys: {sorted(entry)}); return {_FORMS}"
            )
        optimizers.extend(_check_optimizers([entry["optimizer"]], owner))
        if entry.get("lr_scheduler") is not None:
            config = _scheduler_config(entry["lr_scheduler"], owner)
            config.monitor = config.monitor or entry.get("monitor")
            schedulers.append(config)
    return optimizers, schedulers


def _check_optimizers(items: list[Any], owner: str) -> list[torch.optim.Optimizer]:
    for item in items:
        if not isinstance(item, torch.optim.Optimizer):
            raise TypeError(
                f"{owner}.configure_optimizers() gave {type(item).__name__} where a torch.optim.Optimizer "
                f"was expected; return {_FORMS}"
            )
    if not items:
        raise TypeError(f"{owner}.configure_optimizers() returned no optimizer; return {_FORMS}")
    return items


def _scheduler_config(item: Any, owner: str) -> SchedulerConfig:
    if isinstance(item, Mapping):
        if "scheduler" not in item:
            raise TypeError(f"{owner}: an lr_scheduler dict needs a 'scheduler' key (got {sorted(item)})")
        interval = item.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            raise ValueError(f"{owner}: lr_scheduler interval={interval!r}; use 'epoch' or 'step'")
        frequency = int(item.get("frequency", 1))
        if frequency < 1:
            raise ValueError(f"{owner}: lr_scheduler frequency={frequency} must be >= 1")
        config = SchedulerConfig(item["scheduler"], interval, frequency, item.get("monitor"), item.get("name"))
    else:
        config = SchedulerConfig(item)
    if not hasattr(config.scheduler, "step"):
        raise TypeError(
            f"{owner}: {type(config.scheduler).__name__} is not a learning-rate scheduler (it has no step())"
        )
    if _needs_metric(config.scheduler) and config.monitor is None:
        raise ValueError(
            f"{owner}: ReduceLROnPlateau needs a metric to watch; return "
            "{'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'monitor': 'val_loss'}}"
        )
    return config


def _needs_metric(scheduler: Any) -> bool:
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def step_scheduler(config: SchedulerConfig, metrics: Mapping[str, torch.Tensor | float]) -> None:
    if _needs_metric(config.scheduler):
        assert config.monitor is not None
        if config.monitor not in metrics:
            raise ValueError(
                f"the lr scheduler watches {config.monitor!r}, which was not logged; logged metrics: {sorted(metrics)}"
            )
        config.scheduler.step(metrics[config.monitor])
    else:
        config.scheduler.step()
