"""An evaluation run's epoch metrics once its batches are done: each loader's reduced (across
ranks where logged with sync_dist), names shared between loaders refused, shown in callback_metrics
and sent to the loggers as one row, and returned per loader in Lightning's order. Also where each step's
logs go out (``step_counter``: at which loop's batch count; ``loader_suffix``, the epoch's names' too)."""

from __future__ import annotations

from typing import Any

from trainmesh.nested_metrics import nest_results
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.publishing import logger_row
from trainmesh.trainer.results import StageResults
from trainmesh.utilities.exceptions import MisconfigurationException


def reduce_and_show(ctx: LoopContext, stage: str, per_loader: list[Any], opening: StageResults) -> list[dict[str, Any]]:
    """Each loader's epoch metrics (reduced across ranks where logged with sync_dist), shown in
    callback_metrics (not yet sent to the loggers); then ``opening`` (what the start hooks logged) takes
    the epoch-end hooks' logs.

    What the start hooks logged is shown too, as Lightning's ``callback_metrics`` (and
    ``logged_metrics``, ``progress_bar_metrics``) hold it in this run's on_*_epoch_end, in Lightning's
    order: with one loader the start hooks' names first (a loader's value of the same name replaces
    theirs), with several after the loaders'."""
    log_collector, reduced = ctx.state.log_collector, []
    if len(per_loader) == 1:
        _show_opening(ctx, opening)
    for loader_idx, results in enumerate(per_loader):
        log_collector.start_stage(results)
        metrics = log_collector.epoch_metrics()
        reduced.append(metrics)
        if shows_loaders(stage, per_loader):
            ctx.publisher.epoch_metrics(metrics, suffix=loader_suffix(loader_idx, per_loader), to_logger=False)
    if len(per_loader) != 1:
        _show_opening(ctx, opening)
    log_collector.start_stage(opening)
    refuse_shared_names(reduced)
    return reduced


def _show_opening(ctx: LoopContext, opening: StageResults) -> None:
    """The epoch values of what the start hooks logged (``opening``), into callback_metrics (not the loggers)."""
    if opening.entries:
        ctx.state.log_collector.start_stage(opening)
        ctx.publisher.epoch_metrics(ctx.state.log_collector.epoch_metrics(), to_logger=False)


def show_finished_loaders(ctx: LoopContext, stage: str, finished: list[StageResults]) -> None:
    """The batches moved on to another loader: each ``finished`` loader's epoch values, under its
    "/dataloader_idx_N" names, into callback_metrics, logged_metrics and the bar (not the loggers), as
    Lightning's loop stores a loader's outputs there (``update_eval_epoch_metrics``, which reads only that
    loader's: not the start hooks'; nothing while sanity checking). A later loader's batch hooks read the
    earlier loaders' values of this epoch. Under several processes, a loader whose values reduce across
    them (``sync_dist``, a torchmetrics object) is shown at the epoch's end only: ranks may move on at
    different batches, and a collective here would meet another rank's step."""
    if stage in ("sanity_check", "predict"):
        return
    log_collector = ctx.state.log_collector
    current, several = log_collector.results, log_collector.world_size > 1
    for loader_idx, results in enumerate(finished):
        entries = results.entries.values()
        if entries and not (several and any(e.sync_dist or e.metric is not None for e in entries)):
            log_collector.start_stage(results)
            metrics = log_collector.epoch_metrics()
            ctx.publisher.epoch_metrics(metrics, suffix=f"/dataloader_idx_{loader_idx}", to_logger=False)
    log_collector.start_stage(current)


def shows_loaders(stage: str, per_loader: list[Any]) -> bool:
    """Whether each loader's values reach callback_metrics: a sanity check over several loaders shows
    none of them (Lightning's epoch-end view skips per-loader values, and its
    ``update_eval_epoch_metrics`` returns {} while sanity checking); the hooks' own values it shows."""
    return stage != "sanity_check" or len(per_loader) == 1


def refuse_shared_names(reduced: list[dict[str, Any]]) -> None:
    """A name logged with ``add_dataloader_idx=False`` by several loaders would be one metric for
    two loaders; Lightning refuses it, and so does this."""
    seen: set[str] = set()
    for metrics in reduced:
        for key, (_, entry) in metrics.items():
            name = entry.name or key
            if entry.add_dataloader_idx:
                continue
            if name in seen:
                raise MisconfigurationException(
                    f"You called `self.log({name}, ...)` twice with different arguments. This is not allowed: "
                    f"with add_dataloader_idx=False every evaluation dataloader must log its own names (Lightning "
                    "refuses the same); log a name per dataloader, or keep add_dataloader_idx=True"
                )
            seen.add(name)


def publish_epoch(
    ctx: LoopContext, reduced: list[dict[str, Any]], late: dict[str, Any], before_batches: set[int], *, shown: bool
) -> list[dict[str, float]]:
    """Publish each loader's metrics to callback_metrics and the loggers, and what the start and
    epoch-end hooks logged (``late``: no loader's, so named without "/dataloader_idx_N", as
    Lightning's); the loggers get none of the sanity check's. Each loader's results as Lightning
    returns them: its own values and the hooks', in Lightning's order (``before_batches``: the ids
    of the entries the start hooks logged)."""
    # Lightning's views and results are its result collection's metrics in order: with one loader, the
    # start hooks' entries first, then the steps', then the epoch-end hooks'; with several, each loader's,
    # then the hooks'. Each view keeps the later entry's value of a key: a name the start hooks and the
    # steps both log reads the steps' value where the steps write it (callback_metrics always; the results,
    # the row and the bar where logged on epoch only and for them), the start hook's elsewhere.
    first = {key: value for key, value in late.items() if len(reduced) == 1 and id(value[1]) in before_batches}
    own, row = [], logger_row(first)
    for loader_idx, metrics in enumerate(reduced):
        suffix = loader_suffix(loader_idx, reduced)
        own.append(ctx.publisher.epoch_metrics(metrics, suffix=suffix, to_logger=False) if shown else {})
        row.update(logger_row(metrics, suffix))
    leading = ctx.publisher.epoch_metrics(first, to_logger=False)
    if shown and first:  # the steps' entries of those names are later in Lightning's collection
        names = {entry.name or key for key, (_, entry) in first.items()}
        ctx.publisher.epoch_metrics({k: v for k, v in reduced[0].items() if (v[1].name or k) in names}, to_logger=False)
    rest = {key: value for key, value in late.items() if key not in first}
    shared = ctx.publisher.epoch_metrics(rest, to_logger=False)
    row.update(logger_row(rest))
    ctx.publisher.log(row)  # one row for all loaders, as Lightning's
    # (a 1.x module's nested metric as one dict)
    return [nest_results({**leading, **values, **shared}) for values in own]


def step_counter(ctx: LoopContext, stage: str) -> str | None:
    """Which loop's batch count an evaluation step's logged values go to the loggers at (None: the
    sanity check, which logs nothing)."""
    if stage == "sanity_check":
        return None
    return "fit" if ctx.state.stage == "fit" else stage


def loader_suffix(loader_idx: int, loaders: list[Any]) -> str:
    return f"/dataloader_idx_{loader_idx}" if len(loaders) > 1 else ""
