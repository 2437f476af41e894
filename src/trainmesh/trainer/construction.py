"""What the Trainer is built from: its Runtime, loggers and callbacks, from the constructor's
arguments (the seeds' Lightning 1.x spellings translated), and the schedulers' link to their
optimizers once a strategy has prepared them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.runtime import Runtime
from trainmesh.trainer import legacy_arguments
from trainmesh.trainer.optimizers import SchedulerConfig


def point_schedulers_at(configs: list[SchedulerConfig], given: list[Any], prepared: list[Any]) -> None:
    """A strategy may replace an optimizer (zero1 shards its state): schedulers follow it."""
    for old, new in zip(given, prepared):
        inner = getattr(new, "optimizer", new)
        if inner is not old:
            for config in configs:
                if getattr(config.scheduler, "optimizer", None) is old:
                    config.scheduler.optimizer = inner


def build_runtime(
    *,
    accelerator: str,
    devices: int | str | list[int],
    strategy: str | Any,
    precision: str | int,
    compile: bool | dict[str, Any],
    num_nodes: int,
    max_restarts: int,
    enable_model_summary: bool,
    gpus: int | list[int] | None,
    distributed_backend: str | None,
    weights_summary: str | None,
    num_tpu_cores: int | None,
    watchdog_timeout: float | None,
) -> tuple[Runtime, bool]:
    """The Runtime the arguments describe (its watchdog's timeout checked and set), and enable_model_summary
    (the seeds' weights_summary sets it too)."""
    # The seeds' Lightning 1.x spellings (gpus=2, accelerator="dp", ...) become today's.
    settings = legacy_arguments.translate(
        accelerator=accelerator,
        devices=devices,
        strategy=strategy,
        enable_model_summary=enable_model_summary,
        gpus=gpus,
        distributed_backend=distributed_backend,
        weights_summary=weights_summary,
        num_tpu_cores=num_tpu_cores,
    )
    runtime = Runtime(
        accelerator=settings.accelerator,
        devices=settings.devices,
        strategy=settings.strategy,
        precision=precision,
        num_nodes=num_nodes,
        max_restarts=max_restarts,
        compile=compile,
    )
    runtime.supervision.set_watchdog_timeout(watchdog_timeout)  # supervision/watchdog.py
    return runtime, settings.enable_model_summary


def build_loggers(logger: Any, root: str) -> list[Any]:
    """``logger=True`` (the default) is Lightning's default: TensorBoard when it is installed,
    else CSV, under ``<root>/lightning_logs/version_N`` (loggers/default.py)."""
    if logger is False or logger is None:
        return []
    if logger is True:
        from trainmesh.loggers.default import default_logger

        return [default_logger(root)]
    if isinstance(logger, Iterable) and not isinstance(logger, (str, bytes)):
        return list(logger)
    return [logger]


def build_callbacks(
    callbacks: Any, *, progress_bar: bool, checkpointing: bool, summary: bool, fast_dev_run: bool
) -> list[Callback]:
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    given = [] if callbacks is None else ([callbacks] if isinstance(callbacks, Callback) else list(callbacks))
    for item in given:
        if not isinstance(item, Callback):
            raise TypeError(f"callbacks must be trainmesh Callback objects; got {type(item).__name__}")
    result = list(given)
    if summary and not any(type(cb).__name__ == "ModelSummary" for cb in result):
        from trainmesh.callbacks.model_summary import ModelSummary

        result.insert(0, ModelSummary())
    if progress_bar and not any(type(cb).__name__ == "ProgressBar" for cb in result):
        from trainmesh.callbacks.progress import ProgressBar

        result.append(ProgressBar())
    if progress_bar and not any(type(cb).__name__ == "ThroughputMonitor" for cb in result):
        from trainmesh.callbacks.throughput import ThroughputMonitor

        # Every run with a bar reports its throughput; placed before the bar, which shows its latest figures.
        bar_at = next((i for i, cb in enumerate(result) if type(cb).__name__ == "ProgressBar"), len(result))
        result.insert(bar_at, ThroughputMonitor())
    if checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in result):
        # The default keeps last.ckpt too, so fit(ckpt_path="last") resumes with no set-up.
        result.append(ModelCheckpoint(save_last=True))
    if not checkpointing and not fast_dev_run and any(isinstance(cb, ModelCheckpoint) for cb in result):
        raise ValueError("enable_checkpointing=False but a ModelCheckpoint is in callbacks; drop one of them")
    # Callbacks that decide from metrics (checkpoints, early stopping) see everything others logged.
    return sorted(result, key=lambda cb: isinstance(cb, ModelCheckpoint))
