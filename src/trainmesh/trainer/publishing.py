"""Metrics out of the loop: into the state (callback_metrics, the progress bar) and the loggers."""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.hyperparameters import hyperparameters_to_log
from trainmesh.nested_metrics import nest
from trainmesh.trainer.epoch_values import epoch_values
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.metric_values import metric_tensor, read_floats, step_tensor
from trainmesh.trainer.stage_results import StageResults


def callback_metrics(state: LoopState) -> dict[str, Any]:
    """Latest value of every logged metric (scalar tensors): epoch values, and this epoch's step
    values, in one plain dict kept for the run (``state.written_metrics``), as Lightning's: what a
    callback writes into it (``trainer.callback_metrics["x"] = t``, ``.update(...)``;
    LearningRateMonitor's rates) stays until the run ends; what the module logs under the same
    name replaces it at the next read. A plain dict, so that it pickles as one (a program saving
    it loads it back with ``torch.load(weights_only=True)``). Step values are handed out as the
    tensors logged, so reading them here costs no device sync either.
    """
    _show_running_epoch(state)
    shown = state.written_metrics
    computed = nest(_logged_values(state))
    # Only updated, as Lightning's (``_callback_metrics.update``, emptied only where a run or the sanity
    # check starts or ends): a name the last epoch logged stays, with its last value, until logged again.
    shown.update(computed)
    state.computed_metrics = computed
    return shown


def _logged_values(state: LoopState) -> dict[str, torch.Tensor]:
    # In Lightning's order (a program printing callback_metrics sees it): the training step's names
    # first (``name``, then ``name_step``), as its step 1 puts them there, then the epoch values
    # (validation's, then the training epoch's) in the order they were first published.
    wide = state.wide_metrics
    epoch = state.epoch_metrics
    metrics: dict[str, torch.Tensor] = {}
    if state.train_results is not None:
        entries = state.train_results.entries
        ended = state.loop.epoch_finished or state.loop.epoch_ending or not state.loop.batches_done
        for key, value in state.train_results.step_values.items():
            number, entry = step_tensor(value), entries[key]
            name = entry.name or key
            # (once the epoch ended, a value the epoch-end hooks logged under the name replaces it, as Lightning's)
            from_epoch = ended and name in epoch
            if entry.on_epoch and not ended or not entry.on_epoch and not from_epoch:
                metrics[name] = number
            elif from_epoch:
                metrics[name] = metric_tensor(epoch[name], wide=name in wide)
            if entry.on_epoch:
                metrics[f"{name}_step"] = number
    for name, value in epoch.items():
        if name not in metrics:
            metrics[name] = metric_tensor(value, wide=name in wide)
    return metrics


def logged_metrics(state: LoopState) -> dict[str, torch.Tensor]:
    """What the loggers were sent, with this epoch's latest step values for them, as Lightning's
    ``logged_metrics`` (it reads the step's values live, whether or not this step went to a logger),
    under Lightning's names: ``name_step`` for a value logged on step and epoch."""
    _show_running_epoch(state)
    return nest({**state.logged_metrics, **_train_step_logged(state)})


def _show_running_epoch(state: LoopState) -> None:
    """Read before a run's first batch (the log collector's ``epoch_view``), the views show the epoch values
    of what its start hooks logged so far, as Lightning's compute its running result collection's epoch view
    when read (its ``_first_loop_iter`` None): in the hook that logged them already, and in the next ones.
    Not a value that needs the other processes (``sync_dist``, a torchmetrics object, under several): a
    read on one rank only (the progress bar's) would wait for the others; those are shown at the epoch's end.
    """
    collector = state.log_collector
    if collector.epoch_view and collector.results.entries:
        local = StageResults()
        several = collector.world_size > 1
        for key, entry in collector.results.entries.items():
            if not (several and (entry.sync_dist or entry.metric is not None)):
                local.entries[key] = entry
        show_epoch_values(state, epoch_values(local, _no_reduction))


def _no_reduction(value: torch.Tensor, op: str) -> torch.Tensor:
    return value  # (only entries of this process's own values reach it)


def _train_step_logged(state: LoopState) -> dict[str, torch.Tensor]:
    metrics: dict[str, torch.Tensor] = {}
    if state.train_results is not None:
        entries = state.train_results.entries
        ended = _epoch_ended(state)
        for key, value in state.train_results.step_values.items():
            entry = entries[key]
            name = f"{entry.name or key}_step" if entry.on_epoch else entry.name or key
            # once the epoch ended, what the epoch-end hooks logged under the same name replaces the step's
            # value, as Lightning's epoch-end log_metrics updates its logged_metrics (1.9.5 and 2.6 alike)
            if entry.logger and not (ended and name in state.epoch_metrics and name in state.logged_metrics):
                metrics[name] = step_tensor(value)
    return metrics


def keep_step_views(state: LoopState) -> None:
    """A training epoch has ended: its last step values stay in ``logged_metrics``, the progress bar and
    ``callback_metrics`` while the next epoch starts (until its steps log them again), as Lightning's three
    dicts keep what they were last updated with. Before, the next epoch's start showed none of them."""
    callback_metrics(state)  # (it keeps what it computes)
    state.logged_metrics.update(_train_step_logged(state))
    state.bar_step_metrics.update(read_floats(_train_step_bar(state)))


def _epoch_ended(state: LoopState) -> bool:
    return state.loop.epoch_finished or state.loop.epoch_ending or not state.loop.batches_done


def progress_bar_metrics(state: LoopState) -> dict[str, Any]:
    """What ``self.log(..., prog_bar=True)`` logged, as Lightning's: no running ``"loss"`` (Lightning 2
    shows none; 1.x's bar added it from ``get_progress_bar_dict``, which a module may override)."""
    _show_running_epoch(state)
    metrics: dict[str, Any] = read_floats(_train_step_bar(state))  # read from the device together: one wait
    for name, value in state.bar_epoch_metrics.items():
        metrics.setdefault(name, value)
    for name, value in state.bar_step_metrics.items():
        metrics.setdefault(name, value)
    return nest(metrics)


def _train_step_bar(state: LoopState) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    if state.train_results is not None and state.stage == "fit":
        entries = state.train_results.entries
        ended = _epoch_ended(state)
        for key, value in state.train_results.step_values.items():
            entry = entries[key]
            name = f"{entry.name or key}_step" if entry.on_epoch else entry.name or key
            # Lightning's names: name_step beside name_epoch where logged for both; once the epoch
            # ended, what the epoch-end hooks logged under the name for the bar replaces the step's
            if entry.prog_bar and not (ended and name in state.bar_epoch_metrics):
                shown[name] = value
    return shown


def show_epoch_values(state: LoopState, metrics: dict[str, tuple[float, Any]], suffix: str = "") -> dict[str, float]:
    """``Publisher.epoch_metrics`` without the loggers: the views' part, which a read of a view before
    the first batch does too (``_show_running_epoch``)."""
    published: dict[str, float] = {}
    for each_key, (value, entry) in metrics.items():
        name = entry.name or each_key
        end = suffix if entry.add_dataloader_idx else ""
        key = f"{name}{end}"
        keys = [key, f"{name}_epoch{end}"] if entry.on_step else [key]
        if entry.logger:  # what trainer.validate/test return: Lightning's logged metrics (name_epoch where
            # logged on step too), each value in Lightning's dtype, as its .item() gives it
            published[keys[-1]] = float(metric_tensor(value, wide=entry.wide))
        for each in keys:
            state.epoch_metrics[each] = value
        (state.wide_metrics.update if entry.wide else state.wide_metrics.difference_update)(keys)
        if entry.prog_bar:
            state.bar_epoch_metrics[keys[-1]] = value
        if entry.logger:
            state.logged_metrics[keys[-1]] = metric_tensor(value, wide=entry.wide)
    return published


class Publisher:
    """Puts the loop's metrics into the state and into the loggers, on every rank, as Lightning's Trainer
    calls them: its loggers (and trainmesh's) write on global rank 0 only, a program's own logger
    without ``@rank_zero_only`` is called on each rank."""

    def __init__(self, state: LoopState, loggers: list[Any], *, is_global_zero: bool) -> None:
        self.state, self.loggers, self.is_global_zero = state, loggers, is_global_zero

    def epoch_metrics(
        self,
        metrics: dict[str, tuple[float, Any]],
        *,
        suffix: str = "",
        to_logger: bool = True,
        step: int | None = None,
    ) -> dict[str, float]:
        """Put reduced epoch metrics (by entry: one per hook and name) into callback_metrics, logged_metrics
        and the bar (and the loggers, at ``step``: see ``log``); returns them. Each view takes the later
        entry's value of a key, as Lightning's result collection writes its metrics in order: an entry
        logged on step and epoch writes ``name`` and ``name_epoch`` into callback_metrics but only
        ``name_epoch`` into the others, so there an earlier hook's ``name`` stays."""
        published = show_epoch_values(self.state, metrics, suffix)
        if to_logger:
            self.log(logger_row(metrics, suffix), step=step)
        return published

    def callbacks_logs(self, logged_before: int) -> None:
        """What the callbacks' epoch-end hooks logged (beyond the ``logged_before`` entries the results
        held), into callback_metrics, logged_metrics and the bar (not the loggers) before the module's
        hook runs: Lightning's views compute its result collection when read, so the module's
        ``on_*_epoch_end`` sees them. Nothing to do (no reduction, no collective) where they logged nothing."""
        log_collector = self.state.log_collector
        if len(log_collector.results.entries) > logged_before:
            self.epoch_metrics(log_collector.epoch_metrics(), to_logger=False)

    def step_metrics(self) -> None:
        """Send the step values to the loggers (the fit loop calls it where Lightning logs a step)."""
        state = self.state
        if not self.loggers:
            return
        logged = state.log_collector.step_metrics(logger_only=True)
        wide = state.log_collector.wide_step_names()
        state.logged_metrics.update({name: metric_tensor(value, wide=name in wide) for name, value in logged.items()})
        self.log(logged)

    def evaluation_step(self, counter: str | None, loader_idx: int, suffix: str) -> None:
        """After an evaluation batch's end hooks, as Lightning's: what its step logged with
        ``on_step=True`` into ``logged_metrics`` and the progress bar, and to the loggers at the
        count of batches ``counter``'s loop has run of this loader (no epoch key). The sanity check
        (``counter`` None) sends nothing and counts nothing."""
        state = self.state
        results = state.log_collector.results
        logged: dict[str, Any] = {}
        bar: dict[str, Any] = {}
        for key, value in results.step_values.items():
            entry = results.entries[key]
            name = entry.name or key
            key = (f"{name}_step" if entry.on_epoch else name) + (suffix if entry.add_dataloader_idx else "")
            if entry.logger:
                logged[key] = value
            if entry.prog_bar:
                bar[key] = value
        state.logged_metrics.update({name: step_tensor(value) for name, value in logged.items()})
        if bar:  # the sanity check's too, as Lightning's bar shows them while it runs
            state.bar_step_metrics.update(read_floats(bar))
        if counter is None:
            return
        counts = state.eval_step_counts.setdefault(counter, {})
        step = counts.get(loader_idx, 0)
        counts[loader_idx] = step + 1
        if logged and self.loggers:
            _to_loggers(self.loggers, read_floats(logged), step)

    def hyperparameters(self) -> None:
        """At the start of each run (fit, validate, test, predict), as Lightning's: the saved
        hyperparameters to each logger, on every rank (none saved: no call; a clash raises on every rank)."""
        if not self.loggers:  # Lightning's _log_hyperparams: no logger, nothing merged (so no clash raised)
            return
        hparams = hyperparameters_to_log(self.state.module, self.state.datamodule)
        for logger in self.loggers:
            if hparams is not None:
                logger.log_hyperparams(hparams)
            if callable(getattr(logger, "log_graph", None)):  # as Lightning's; a user's own logger may not define it
                logger.log_graph(self.state.module)
            if callable(getattr(logger, "save", None)):  # Lightning's too: TensorBoard's makes its event file
                logger.save()

    def log(self, metrics: dict[str, float], step: int | None = None, *, stepped: int | None = None) -> None:
        """To the loggers (none when ``metrics`` is empty) with the epoch, at ``step``, by default
        Lightning's: the batches of the fit that ended with an optimizer step (its
        ``_batches_that_stepped``, or ``stepped`` where the loop has moved it on), so the first step's
        values go to step 0. Without ``step``, a metric the program
        logged as ``"step"`` is the step instead, as Lightning's ``LoggerConnector.log_metrics`` takes
        it (``int(...)``, out of the row, and no ``epoch`` added): ``log_dict({..., "step": epoch})``
        is how 1.x programs put epochs on a logger's x-axis."""
        if metrics and self.loggers and not self.state.sanity_checking:
            if step is None and "step" in metrics:
                row = {name: value for name, value in metrics.items() if name != "step"}
                _to_loggers(self.loggers, row, int(metrics["step"]))
                return
            at = step if step is not None else self.state.loop.batches_stepped if stepped is None else stepped
            _to_loggers(self.loggers, {**metrics, "epoch": self.state.current_epoch}, at)


def _to_loggers(loggers: list[Any], row: dict[str, float], step: int) -> None:
    """As Lightning's logger connector: each logger's ``log_metrics`` then its ``save`` (so what a
    program logs itself without a step counts its rows from the Trainer's last write, as there)."""
    row = nest(row)
    for logger in loggers:
        logger.log_metrics(metrics=row, step=step)  # by keyword, as Lightning's logger connector calls it
        if callable(getattr(logger, "save", None)):
            logger.save()


def logger_row(metrics: dict[str, tuple[float, Any]], suffix: str = "") -> dict[str, float]:
    """What the loggers get of reduced epoch metrics, under Lightning's names; each value as reduced
    (Lightning's value: summed in float32, or float64 where a float64 tensor was logged)."""
    row = {}
    for key, (value, entry) in metrics.items():
        name = entry.name or key
        if entry.logger:
            end = suffix if entry.add_dataloader_idx else ""
            row[f"{name}_epoch{end}" if entry.on_step else f"{name}{end}"] = value
    return row
