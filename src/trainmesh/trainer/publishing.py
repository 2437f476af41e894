"""Metrics out of the loop: into the state (callback_metrics, the progress bar) and the loggers."""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.results import metric_tensor, read_floats, step_tensor


def callback_metrics(state: LoopState) -> dict[str, torch.Tensor]:
    """Latest value of every logged metric (scalar tensors): epoch values, and this epoch's
    step values. Step values are handed out as the tensors logged, so reading them here
    costs no device sync either.
    """
    wide = state.wide_metrics
    metrics = {name: metric_tensor(value, wide=name in wide) for name, value in state.epoch_metrics.items()}
    if state.train_results is not None:
        entries = state.train_results.entries
        for name, value in state.train_results.step_values.items():
            number = step_tensor(value)
            if entries[name].on_epoch:
                metrics[f"{name}_step"] = number
                if state.loop.batches_done and not (state.loop.epoch_finished or state.loop.epoch_ending):
                    metrics[name] = number
            else:
                metrics[name] = number
    return metrics


def progress_bar_metrics(state: LoopState) -> dict[str, Any]:
    shown: dict[str, Any] = {}  # read from the device together: one wait, not one per value
    loss = state.loop.last_loss
    # Lightning 1.x's get_progress_bar_dict(): a module that overrides it gives the standard items
    # (the running loss; see Module.get_progress_bar_dict) itself (trainer/lightning1/legacy_hooks.py).
    legacy = state.hooks is not None and state.hooks.module_overrides("get_progress_bar_dict")
    if loss is not None and state.stage == "fit" and not legacy:
        shown["loss"] = loss
    if state.train_results is not None and state.stage == "fit":
        entries = state.train_results.entries
        for name, value in state.train_results.step_values.items():
            if entries[name].prog_bar:
                shown[name] = value
    metrics: dict[str, Any] = read_floats(shown)
    for name, value in state.epoch_metrics.items():
        if name in state.prog_bar_names:
            metrics.setdefault(name, value)
    return {**state.module.get_progress_bar_dict(), **metrics} if legacy else metrics


class Publisher:
    """Puts the loop's metrics into the state and, on global rank 0, into the loggers."""

    def __init__(self, state: LoopState, loggers: list[Any], *, is_global_zero: bool) -> None:
        self.state, self.loggers, self.is_global_zero = state, loggers, is_global_zero

    def epoch_metrics(
        self, metrics: dict[str, tuple[float, Any]], *, suffix: str = "", to_logger: bool = True
    ) -> dict[str, float]:
        """Put reduced epoch metrics into callback_metrics (and the loggers); returns them."""
        state = self.state
        published: dict[str, float] = {}
        for name, (value, entry) in metrics.items():
            key = f"{name}{suffix}"
            published[key] = value
            keys = [key, f"{name}_epoch{suffix}"] if entry.on_step else [key]
            for each in keys:
                state.epoch_metrics[each] = value
            (state.wide_metrics.update if entry.wide else state.wide_metrics.difference_update)(keys)
            if entry.prog_bar:
                state.prog_bar_names.add(key)
            if entry.logger:
                state.logged_metrics[keys[-1]] = metric_tensor(value, wide=entry.wide)
        if to_logger:
            logged = {
                (f"{n}_epoch{suffix}" if e.on_step else f"{n}{suffix}"): v for n, (v, e) in metrics.items() if e.logger
            }
            self.log({**logged, "epoch": float(state.current_epoch)})
        return published

    def step_metrics(self) -> None:
        """Send the step values to the loggers, once per optimizer step at most."""
        state = self.state
        if state.last_logged_step == state.global_step or not self.loggers:
            return
        state.last_logged_step = state.global_step
        logged = state.log_collector.step_metrics(logger_only=True)
        wide = state.log_collector.wide_step_names()
        state.logged_metrics.update({name: metric_tensor(value, wide=name in wide) for name, value in logged.items()})
        if logged:
            self.log({**logged, "epoch": float(state.current_epoch)})

    def log(self, metrics: dict[str, float]) -> None:
        if self.loggers and self.is_global_zero and not self.state.sanity_checking:
            for logger in self.loggers:
                logger.log_metrics(metrics, step=self.state.global_step)
