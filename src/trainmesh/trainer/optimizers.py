"""Read what ``configure_optimizers`` returned into optimizers and scheduler configs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trainmesh.trainer.loop_progress import Progress
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.types import LRSchedulerConfig

_FORMS = (
    "an optimizer; a list of optimizers; ([optimizers], [schedulers]); "
    "{'optimizer': opt, 'lr_scheduler': sched or {'scheduler': sched, 'interval': 'step'|'epoch', "
    "'frequency': n, 'monitor': name}}; or a list of such dicts"
)


# Lightning's LRSchedulerConfig itself, what ``trainer.lr_scheduler_configs`` holds (its type, fields and repr):
# ``reduce_on_plateau`` is stepped with the monitored metric (by default: a ReduceLROnPlateau); ``strict``:
# the monitored metric missing stops the run (True) or skips this step with a warning.
SchedulerConfig = LRSchedulerConfig


def parse_optimizers(
    returned: Any,
    owner: str,
    *,
    custom_scheduler_step: bool = False,
    manual: bool = False,
    frequency_valid: bool = True,
) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """Normalise every form Lightning users write into (optimizers, scheduler configs).

    ``custom_scheduler_step``: the loop never calls a scheduler's ``step`` itself (the module overrides
    ``lr_scheduler_step``, or steps them in manual optimization), so a scheduler of any class is taken.
    ``manual``: manual optimization, where the module steps a plateau scheduler with its own metric
    (``sch.step(self.trainer.callback_metrics["loss"])``), so none needs a ``monitor``, as in Lightning.
    ``frequency_valid``: an optimizer dict's ``"frequency"`` is Lightning 1.x's (a ``training_step`` that takes
    ``optimizer_idx``); elsewhere Lightning 2.x warns of it as an unsupported key, and so do we.
    """
    optimizers, configs = _parse(returned, owner, frequency_valid)
    if manual:
        _warn_manual_keys(returned)
    for config in configs:
        _check_scheduler(config, owner, custom_scheduler_step, manual)
        if getattr(config.scheduler, "optimizer", optimizers[0]) not in optimizers:  # Lightning's check and type
            raise MisconfigurationException(
                f"{owner}: the lr scheduler {type(config.scheduler).__name__} is attached with an optimizer that "
                "wasn't returned from `configure_optimizers`; build it on one of the returned optimizers"
            )
    return optimizers, configs


def _warn_manual_keys(returned: Any) -> None:
    """Lightning's warning under manual optimization, where the module steps its schedulers itself."""
    entries = returned if isinstance(returned, (list, tuple)) else [returned]
    if _two_lists(returned):
        entries = returned[1] if isinstance(returned[1], (list, tuple)) else [returned[1]]
    for entry in entries:
        scheduler = entry.get("lr_scheduler") if isinstance(entry, Mapping) and "optimizer" in entry else entry
        ignored = (
            [k for k in scheduler if k in ("reduce_on_plateau", "monitor", "strict")]
            if isinstance(scheduler, Mapping)
            else []
        )
        if ignored:
            rank_zero_warn(
                f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored. You need to "
                "call `lr_scheduler.step()` manually in manual optimization.",
                category=RuntimeWarning,
            )


def optimizer_frequencies(returned: Any, owner: str) -> list[int]:
    """Lightning 1.x's ``"frequency"`` of each optimizer dict in a list (``[{"optimizer": d, "frequency":
    5}, {"optimizer": g, "frequency": 1}]``: five batches for the first, then one for the second);
    [] where none is given. 1.x's rule: given for every optimizer, or for none."""
    if not (isinstance(returned, Sequence) and not isinstance(returned, (str, bytes))):
        return []
    dicts = [entry for entry in returned if isinstance(entry, Mapping)]
    given = [entry["frequency"] for entry in dicts if entry.get("frequency") is not None]
    if not given:
        return []
    if len(given) != len(returned):
        raise ValueError(f"{owner}.configure_optimizers(): a 'frequency' must be given to each optimizer, or to none")
    for frequency in given:
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(
                f"{owner}.configure_optimizers(): an optimizer's frequency must be an int >= 1, got {frequency!r}"
            )
    return list(given)


def _parse(
    returned: Any, owner: str, frequency_valid: bool = True
) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    if returned is None:  # Lightning's: the fit runs, its steps run the closure and change nothing
        rank_zero_warn(
            "`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer",
            category=UserWarning,
        )
        return [NoOptimizer()], []
    if isinstance(returned, torch.optim.Optimizer):
        return [returned], []
    if isinstance(returned, (str, bytes)):
        raise MisconfigurationException(
            f"Unknown configuration for model optimizers: {owner}.configure_optimizers() returned "
            f"{type(returned).__name__}; return {_FORMS}"
        )
    if isinstance(returned, Mapping):
        return _from_dicts([returned], owner, frequency_valid)
    if _two_lists(returned):
        optimizers = _check_optimizers(list(returned[0]), owner)
        schedulers = (
            returned[1] if isinstance(returned[1], (list, tuple)) else [returned[1]]
        )  # Lightning takes one alone
        return optimizers, [_scheduler_config(s, owner) for s in schedulers]
    if isinstance(returned, Sequence) and returned and all(isinstance(x, Mapping) for x in returned):
        return _from_dicts(list(returned), owner, frequency_valid)
    if isinstance(returned, Sequence) and returned:
        return _check_optimizers(list(returned), owner), []
    raise MisconfigurationException(  # Lightning's first words, then what to return
        f"Unknown configuration for model optimizers: {owner}.configure_optimizers() returned "
        f"{type(returned).__name__}; return {_FORMS}"
    )


def _two_lists(returned: Any) -> bool:
    """Lightning's ``([optimizers], [schedulers])``, the second also a single scheduler."""
    if not (isinstance(returned, (list, tuple)) and len(returned) == 2 and isinstance(returned[0], (list, tuple))):
        return False
    first = returned[0]
    return bool(first) and all(isinstance(x, torch.optim.Optimizer) for x in first) and not _is_optimizer(returned[1])


def _is_optimizer(item: Any) -> bool:
    return isinstance(item, torch.optim.Optimizer) or (
        isinstance(item, (list, tuple)) and any(isinstance(x, torch.optim.Optimizer) for x in item)
    )


class NoOptimizer(torch.optim.Optimizer):
    """What a fit steps where ``configure_optimizers`` returned None (Lightning's ``_MockOptimizer``):
    ``step(closure)`` runs the closure (the training step and backward) and changes no weight."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1)], {})

    def add_param_group(self, param_group: dict[Any, Any]) -> None:
        pass  # the stand-in's one parameter is all it holds

    def load_state_dict(self, state_dict: dict[Any, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def __repr__(self) -> str:
        return "No Optimizer"


def _from_dicts(
    dicts: list[Mapping[str, Any]], owner: str, frequency_valid: bool = True
) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    optimizers, schedulers = [], []
    known = {"optimizer", "lr_scheduler", "monitor"} | ({"frequency"} if frequency_valid else set())
    for entry in dicts:
        extra = set(entry) - known
        if extra:
            rank_zero_warn(f"Found unsupported keys in the optimizer configuration: {extra}", category=RuntimeWarning)
        if "optimizer" not in entry:
            raise MisconfigurationException(
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
            raise MisconfigurationException(
                f"Unknown configuration for model optimizers: {owner}.configure_optimizers() gave "
                f"{type(item).__name__} where a torch.optim.Optimizer was expected; return {_FORMS}"
            )
    if not items:
        raise MisconfigurationException(f"{owner}.configure_optimizers() returned no optimizer; return {_FORMS}")
    return items


_SCHEDULER_KEYS = frozenset(SchedulerConfig.__dataclass_fields__) | {"opt_idx"}  # opt_idx: Lightning 1.x's


def _scheduler_config(item: Any, owner: str) -> SchedulerConfig:
    if not isinstance(item, Mapping):
        return SchedulerConfig(item, reduce_on_plateau=_is_plateau(item))
    extra = set(item) - _SCHEDULER_KEYS
    if extra:  # Lightning's warning; the keys are dropped
        rank_zero_warn(
            f"Found unsupported keys in the lr scheduler dict: {extra}. HINT: remove them from the output of "
            "`configure_optimizers`.",
            category=RuntimeWarning,
        )
    if "scheduler" not in item:
        raise MisconfigurationException(
            'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler'
            f" ({owner} gave the keys {sorted(item)})"
        )
    interval = item.get("interval", "epoch")
    if interval not in ("epoch", "step"):
        raise MisconfigurationException(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "{interval}" ({owner})'
        )
    frequency = int(item.get("frequency", 1))
    if frequency < 1:
        raise ValueError(f"{owner}: lr_scheduler frequency={frequency} must be >= 1")
    if isinstance(item["scheduler"], torch.optim.lr_scheduler.OneCycleLR) and interval == "epoch":
        rank_zero_warn(
            "A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean 'interval': 'step'?",
            category=RuntimeWarning,
        )
    plateau = bool(item.get("reduce_on_plateau", _is_plateau(item["scheduler"])))
    return SchedulerConfig(
        item["scheduler"],
        name=item.get("name"),
        interval=interval,
        frequency=frequency,
        reduce_on_plateau=plateau,
        monitor=item.get("monitor"),
        strict=item.get("strict", True),
    )


def _check_scheduler(config: SchedulerConfig, owner: str, custom_step: bool, manual: bool) -> None:
    """Lightning's ``_validate_scheduler_api``, its words first (a program may match them), then ours."""
    name = type(config.scheduler).__name__
    if not (callable(getattr(config.scheduler, "state_dict", None)) and hasattr(config.scheduler, "load_state_dict")):
        raise TypeError(
            f"The provided lr scheduler `{name}` is invalid. It should have `state_dict` and `load_state_dict` "
            f"methods defined ({owner}: checkpoints save and restore it through them)."
        )
    # Lightning steps only torch's schedulers itself (step() or step(metric)), before training refusing any
    # other in automatic optimization unless lr_scheduler_step is overridden: one with a step of its own
    # signature (timm's step(epoch)) would otherwise fail at the first epoch's end, after training.
    if not custom_step and not manual and not isinstance(config.scheduler, _TORCH_SCHEDULERS):
        raise MisconfigurationException(
            f"The provided lr scheduler `{name}` doesn't follow PyTorch's LRScheduler API. You should override the "
            "`LightningModule.lr_scheduler_step` hook with your own logic if you are using a custom LR scheduler "
            f"({owner}.lr_scheduler_step(scheduler, metric): call the scheduler's own step there)."
        )
    if config.reduce_on_plateau and config.monitor is None and not manual:
        raise MisconfigurationException(
            f"`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used ({owner}: "
            f"{name} is stepped with a metric). For example: "
            "{'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'monitor': 'val_loss'}}"
        )


# What Lightning steps itself (its LRSchedulerTypeTuple)
_TORCH_SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _is_plateau(scheduler: Any) -> bool:
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def step_scheduler(
    config: SchedulerConfig,
    metrics: Mapping[str, torch.Tensor | float],
    lr_scheduler_step: Callable[[Any, Any], None] | None = None,
    *,
    counted: Progress | None = None,
) -> None:
    """Step one scheduler: through the module's ``lr_scheduler_step(scheduler, metric)`` where it
    overrides it, else as its default does (``step()``, or ``step(metric)`` for a plateau scheduler)."""
    metric = None
    if config.reduce_on_plateau:
        assert config.monitor is not None
        if config.monitor not in metrics:
            if config.strict:
                raise MisconfigurationException(  # Lightning's type and words, then what to do
                    f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available. Available "
                    f"metrics are: {list(metrics)}. Condition can be set using `monitor` key in lr scheduler dict;"
                    " log the metric, or set 'strict': False in the lr_scheduler dict to skip such steps"
                )
            # Lightning's words and category
            rank_zero_warn(
                f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available but strict is set "
                "to `False`. Skipping learning rate update.",
                category=RuntimeWarning,
            )
            return
        metric = metrics[config.monitor]
    scheduler: Any = config.scheduler  # any class where the module steps it (lr_scheduler_step)
    if counted is not None:  # Lightning's scheduler_progress: ready before the step, completed after
        counted.ready()
    if lr_scheduler_step is not None:
        lr_scheduler_step(scheduler, metric)
    elif metric is None:
        scheduler.step()
    else:
        scheduler.step(metric)
    if counted is not None:
        counted.completed()
