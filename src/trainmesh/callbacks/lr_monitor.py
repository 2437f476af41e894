"""Log each optimizer's learning rate (and optionally momentum) as training runs."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue

_INTERVALS = (None, "step", "epoch")


class LearningRateMonitor(Callback):
    """Send the learning rate of every optimizer and parameter group to the loggers, as Lightning
    2.6's ``LearningRateMonitor`` does.

    Names follow Lightning: ``lr-<OptimizerClass>``, or the scheduler config's ``name``; a
    ``-1``, ``-2`` suffix for the second and third optimizer of one class; ``/pg1``, ``/pg2``
    (or the group's ``"name"``) when an optimizer has several parameter groups. With
    ``log_momentum=True`` each also gets ``<name>-momentum`` (SGD's ``momentum``, Adam's
    ``betas[0]``), with ``log_weight_decay=True`` ``<name>-weight_decay``.

    Where and at which step, as Lightning: ``logging_interval="step"`` logs at the start of each
    training batch where the loggers are due (every ``log_every_n_steps`` of the batches that step,
    and every batch once a stop is asked), ``"epoch"`` at the start of each epoch, and ``None``
    follows each scheduler's own interval (optimizers without a scheduler are logged at both); each
    at the loggers' step, the batches that ended with an optimizer step so far (so the values a
    batch trains with are logged at that batch's row).

    Args:
        logging_interval: ``"step"``, ``"epoch"`` or None (each scheduler's own) (default ``None``).
        log_momentum: log the momentum (or Adam's beta1) too (default ``False``).
        log_weight_decay: log each group's ``weight_decay`` too (default ``False``).

    Examples:
        >>> monitor = LearningRateMonitor(logging_interval="step", log_momentum=True)
        >>> # Trainer(callbacks=[monitor]) logs e.g. {"lr-SGD": 0.1, "lr-SGD-momentum": 0.9}
    """

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in _INTERVALS:
            raise ValueError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}): use 'step', 'epoch', or None "
                "to follow each scheduler's own interval"
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}  # every value logged, by name
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    # ---- hooks --------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        # fast_dev_run turns loggers off on purpose; there is nothing to complain about then.
        if stage == "fit" and not trainer.loggers and not trainer.fast_dev_run:
            raise MisconfiguredValue(
                "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger. Set "
                "Trainer(logger=True) (the default CSV logger) or pass one, e.g. "
                "Trainer(logger=TensorBoardLogger(...)); or drop the callback"
            )

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        # Lightning's test: any optimizer (those with a scheduler, where there are some) lacking both keys
        scheduled = [getattr(c.scheduler, "optimizer", None) for c in trainer.lr_scheduler_configs]
        checked = [opt for opt in scheduled if opt is not None] if scheduled else _torch_optimizers(trainer)
        if self.log_momentum and trainer.is_global_zero and any(not _has_momentum(opt) for opt in checked):
            warnings.warn(
                "You have set log_momentum=True, but some optimizers do not have momentum. This will log a "
                "value 0 for the momentum.",
                RuntimeWarning,
                stacklevel=2,
            )
        # As Lightning's: every name has its (empty) history from the start, in the order names are made
        names = [name for names, _, _ in optimizer_names(trainer) for name in names]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if self.logging_interval != "step":
            self._log(trainer, pl_module, "epoch" if self.logging_interval is None else "any")

    def on_train_batch_start(self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int) -> None:
        # Lightning's should_update_logs: "+ 1" as it is asked before the batch's optimizer step;
        # log_every_n_steps=0 logs no step at all, not even a stopping one
        every = trainer.log_every_n_steps
        due = every != 0 and ((trainer.loop.batches_stepped + 1) % every == 0 or trainer.should_stop)
        if due and self.logging_interval != "epoch":
            self._log(trainer, pl_module, "step" if self.logging_interval is None else "any")

    # ---- what is logged -----------------------------------------------------------------------
    def _log(self, trainer: TrainerView, pl_module: Any, interval: str) -> None:
        stats = self.extract_stats(trainer, interval)
        # As Lightning 2's, the values are in callback_metrics too (a ModelCheckpoint may monitor them);
        # pytorch-lightning 1.9.5's only logs them, so a 1.x run (its module or Trainer) leaves callback_metrics alone
        if not getattr(trainer, "_written_for_lightning1", False):  # (a test's stand-in trainer has none)
            device = trainer.runtime.device
            trainer.callback_metrics.update({name: torch.tensor(value, device=device) for name, value in stats.items()})
        if stats:  # to each logger on every rank, as Lightning's (its loggers write on rank 0 only)
            for logger in trainer.loggers:
                logger.log_metrics(stats, step=trainer.loop.batches_stepped)

    def extract_stats(self, trainer: TrainerView, interval: str = "any") -> dict[str, float]:
        """The current values to log: schedulers whose interval matches (all for ``"any"``),
        and every optimizer that has no scheduler."""
        stats: dict[str, float] = {}
        for names, optimizer, scheduler_interval in optimizer_names(trainer):
            self._remap_keys(names)
            if scheduler_interval is not None and interval not in (scheduler_interval, "any"):
                continue
            uses_betas = "betas" in optimizer.defaults
            for name, group in zip(names, optimizer.param_groups):
                stats[name] = float(group["lr"])
                self.lrs.setdefault(name, []).append(stats[name])
                if self.log_momentum:
                    momentum = group["betas"][0] if uses_betas else group.get("momentum", 0.0)
                    stats[f"{name}-momentum"] = self.last_momentum_values[f"{name}-momentum"] = float(momentum)
                if self.log_weight_decay:
                    decay = float(group["weight_decay"])
                    stats[f"{name}-weight_decay"] = self.last_weight_decay_values[f"{name}-weight_decay"] = decay
        return stats

    def _remap_keys(self, names: list[str]) -> None:
        """Lightning's: an optimizer that gained parameter groups (a finetuning callback adds them) logs
        as ``<name>/pg1``, ``/pg2``: its history so far moves from ``<name>`` to ``<name>/pg1`` (to the
        end of ``lrs``), and each new name starts an empty one."""
        for name in names:
            old = name.replace("/pg1", "")
            if "/pg1" in name and old in self.lrs:
                self.lrs[name] = self.lrs.pop(old)
            elif name not in self.lrs:
                self.lrs[name] = []


def optimizer_names(trainer: TrainerView) -> list[tuple[list[str], Any, str | None]]:
    """``(names per param group, torch optimizer, scheduler interval or None)`` for each optimizer.

    Optimizers driven by a scheduler come first, in scheduler order, then the rest.

    >>> import torch, types
    >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    >>> optimizer_names(types.SimpleNamespace(lr_scheduler_configs=[], optimizers=[opt]))[0][0]
    ['lr-SGD']
    """
    entries: list[tuple[list[str], Any, str | None]] = []
    seen: list[Any] = []
    per_class: dict[type, int] = defaultdict(int)
    for config in trainer.lr_scheduler_configs:
        optimizer = getattr(config.scheduler, "optimizer", None)
        if optimizer is None:
            continue  # a custom scheduler that holds no optimizer: nothing to read the lr from
        entries.append((_group_names(optimizer, config.name, per_class), optimizer, config.interval))
        seen.append(optimizer)
    for optimizer in _torch_optimizers(trainer):
        if not any(optimizer is other for other in seen):
            entries.append((_group_names(optimizer, None, per_class), optimizer, None))
            seen.append(optimizer)
    _check_unique([name for names, _, _ in entries for name in names])
    return entries


def _group_names(optimizer: Any, given: str | None, per_class: dict[type, int]) -> list[str]:
    base = given
    if base is None:
        cls = type(optimizer)
        per_class[cls] += 1
        base = f"lr-{cls.__name__}" + (f"-{per_class[cls] - 1}" if per_class[cls] > 1 else "")
    groups = optimizer.param_groups
    given_names = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
    repeated = {name for name in given_names if given_names.count(name) > 1}
    if repeated:
        raise MisconfiguredValue(
            "A single `Optimizer` cannot have multiple parameter groups with identical "
            f"`name` values. {base} has duplicated parameter group names {repeated}"
        )
    if len(groups) == 1:
        group_name = groups[0].get("name")
        return [f"{base}/{group_name}" if group_name else base]
    return [f"{base}/{group.get('name', f'pg{i + 1}')}" for i, group in enumerate(groups)]


def _check_unique(names: list[str]) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"LearningRateMonitor: several optimizers or parameter groups would be logged as {repeated}; give "
            "each parameter group a distinct 'name' and each lr_scheduler config a distinct 'name'"
        )


def _torch_optimizers(trainer: TrainerView) -> list[Any]:
    return list(trainer.optimizers)  # the program's own optimizers, as Lightning's


def _has_momentum(optimizer: Any) -> bool:
    return "betas" in optimizer.defaults or "momentum" in optimizer.defaults
