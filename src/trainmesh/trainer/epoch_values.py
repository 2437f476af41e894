"""The epoch values of a stage's logged metrics: each name's accumulator reduced to one number,
across processes where it was logged with ``sync_dist`` (Lightning's ``_ResultCollection``
rules and arithmetic), and the reset of logged torchmetrics objects once their loop is done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from trainmesh.trainer.stage_results import LoggedEntry, StageResults
from trainmesh.utilities.process_group import process_group_exists
from trainmesh.utilities.rank_zero import WarningCache
from trainmesh.utilities.warnings import PossibleUserWarning

# Once per metric name and process, as Lightning's module-level cache in its result.py.
_WARNINGS = WarningCache()


def epoch_values(
    results: StageResults, reduce_across: Callable[..., torch.Tensor]
) -> dict[str, tuple[float, LoggedEntry]]:
    """Each epoch-level metric of ``results`` by its entry's key (one per hook and name, in the order first
    logged, as Lightning's result collection keeps them; ``entry.name`` names it): reduced across processes
    with ``reduce_across`` where logged with ``sync_dist`` (over the entry's ``sync_dist_group`` where it has one:
    ``reduce_across(value, op, group=G)``), else this process's own (Lightning's rule)."""
    out: dict[str, tuple[float, LoggedEntry]] = {}
    for key, entry in results.entries.items():
        name = entry.name or key  # (the views take a later hook's value of the name: publishing.py)
        if not entry.on_epoch:
            continue
        if entry.metric is not None:
            # Lightning computes a logged Metric here and resets it only once its loop's
            # results are done (reset_metric_objects): the epoch-end hooks may still call compute()
            value = entry.metric.compute()
            out[key] = (float(value), entry)
            continue
        if entry.total is None:
            continue
        # Lightning's condition: logged without sync_dist (rank_zero_only aside) while a process group
        # exists (ddp on one device too), whatever the run's size
        # (self.log's own sync_dist: an entry restored from a checkpoint holds no call's arguments)
        asked_sync = entry.given[5] if entry.given else entry.sync_dist
        if not asked_sync and process_group_exists():
            _advise_sync_dist(name)
        # As Lightning's: reduced across processes only with sync_dist; else this rank's own value
        # (checkpoint and early-stopping decisions are made one for all: broadcast / any-reduced).
        reduce = reduce_across if entry.sync_dist else _local
        if entry.sync_dist and entry.group is not None:
            reduce = functools.partial(reduce_across, group=entry.group)
        if entry.reduce_fx == "mean":
            # Lightning's _ResultMetric.compute: the sum and the integer count each reduced with
            # "mean" (over gloo its sum / world size, copied back into the count's int64: truncated)
            total = reduce(entry.total.clone(), "mean")
            count = reduce(torch.tensor(int(entry.weight), device=total.device), "mean").to(torch.int64)
            value = total / count
        elif entry.reduce_fx == "sum":
            value = reduce(entry.total.clone(), "sum")
        else:
            value = reduce(entry.total.clone(), entry.reduce_fx)
        out[key] = (float(value), entry)
    return out


def reset_metric_objects(logged: list[StageResults]) -> None:
    """Reset the torchmetrics objects logged into ``logged`` (where Lightning's loops call
    ``reset_results``: after ``on_validation_end`` / ``on_test_end``, after ``on_train_epoch_end``)."""
    for results in logged:
        for entry in results.entries.values():
            if entry.metric is not None:
                entry.metric.reset()


def _advise_sync_dist(name: str) -> None:
    """Lightning 2.6's advice (its ``_ResultCollection._get_cache``), once per name and process, when
    a tensor is logged per epoch without ``sync_dist`` while a process group exists."""
    _WARNINGS.warn(
        f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging on epoch level in"
        " distributed setting to accumulate the metric across devices.",
        category=PossibleUserWarning,
        stacklevel=6,  # the caller of LogCollector.epoch_metrics, as before this module was split out
    )


def _local(value: torch.Tensor, op: str) -> torch.Tensor:
    return value  # this process's own value: logged without sync_dist (rank_zero_only too)
