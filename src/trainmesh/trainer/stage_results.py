"""What one stage run's ``self.log`` calls leave behind: each logged name's entry (its options and
epoch accumulator) and the latest step values, with the form a checkpoint keeps them in.

The log collector (``results.py``) writes them; the epoch reduction (``epoch_values.py``), the
loops and the checkpoints read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LoggedEntry:
    """One name logged by one hook: ``self.log``'s options, resolved, and the epoch accumulator."""

    prog_bar: bool
    logger: bool
    on_step: bool
    on_epoch: bool
    reduce_fx: str
    sync_dist: bool
    total: torch.Tensor | None = None  # accumulator for "mean"/"sum" (Lightning's dtype), "max"/"min"
    weight: float = 0.0
    metric: Any = None  # a torchmetrics Metric computes its own epoch value
    # A float64 tensor was logged: Lightning's epoch value is then float64, else float32 (lightning_dtype).
    wide: bool = False
    # False: an evaluation loader's value keeps its name, without "/dataloader_idx_N" (self.log's add_dataloader_idx)
    add_dataloader_idx: bool = True
    # Logged by rank 0 alone (self.log's rank_zero_only): never reduced across processes, as Lightning's
    rank_zero_only: bool = False
    # A step value and nothing else (training_step's default): self.log's fast path.
    plain_step: bool = field(init=False, repr=False, compare=False)
    # The name as logged, and the hook that logged it (Lightning keeps one metric per hook and name,
    # so an entry's key in StageResults is the name, or "name<US>hook" for a second hook's)
    name: str = field(default="", compare=False)
    fx: str = field(default="training_step", compare=False)
    # self.log's sync_dist_group: a torch process group of some data-parallel processes to reduce over
    # (None: every one), as Lightning's strategy.reduce(group=...); a checkpoint keeps none (the next call's)
    group: Any = field(default=None, repr=False, compare=False)
    # The self.log arguments of the latest call that matched (a call with others is checked: check_arguments)
    given: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        self.plain_step = self.on_step and not self.on_epoch and not self.sync_dist


@dataclass
class StageResults:
    """The metrics logged during one stage run (a training epoch, one validation run, ...)."""

    entries: dict[str, LoggedEntry] = field(default_factory=dict)
    # The latest step value of each name: a detached tensor where it was logged (nothing is read
    # from the device until a logger or the progress bar shows it), or a Python float.
    step_values: dict[str, torch.Tensor | float] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        # Kept in checkpoints so a mid-epoch resume reports the same epoch means.
        return {
            name: {
                "total": e.total,
                "weight": e.weight,
                "options": (e.prog_bar, e.logger, e.on_step, e.on_epoch, e.reduce_fx, e.sync_dist),
                "name": e.name,
                "fx": e.fx,
            }
            for name, e in self.entries.items()
            if e.metric is None
        }

    @staticmethod
    def saved_reduce_fx(saved: dict[str, Any]) -> str:
        """The ``reduce_fx`` of one name's entry in ``state_dict()`` ("mean", "sum", "max", "min")."""
        return LoggedEntry(*saved["options"]).reduce_fx

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, saved in state.items():
            entry = LoggedEntry(*saved["options"])
            entry.total, entry.weight = saved["total"], saved["weight"]
            entry.name, entry.fx = saved.get("name", name), saved.get("fx", "training_step")
            self.entries[name] = entry
