"""Trainer: the loop (epochs, steps, hooks, logging, checkpoint cadence) over a Runtime."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.runtime import Runtime, Strategy
from trainmesh.seed import make_deterministic
from trainmesh.supervision import DEFAULT_WATCHDOG_TIMEOUT
from trainmesh.trainer import evaluation, fit_loop, seed_spellings
from trainmesh.trainer.checkpointing import (TENSOR_ENTRIES, build_checkpoint, clear_interrupted_saves,
                                             resolve_ckpt_path, restore_checkpoint, resume_source)
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.finite_loss import verify_finite_losses
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.trainer.optimizers import SchedulerConfig, parse_optimizers
from trainmesh.trainer.results import MetricSink, metric_tensor, read_floats, step_tensor
from trainmesh.trainer.settings import LoopSettings, check_loop_settings
from trainmesh.trainer.worker_outcome import WorkerOutcome
from trainmesh.utilities.rank_zero import rank_zero_info


class Trainer:
    """Runs a :class:`trainmesh.Module` through fit, validate, test and predict.

    >>> trainer = Trainer(max_epochs=1, accelerator="cpu", enable_progress_bar=False, logger=False,
    ...                   enable_checkpointing=False, enable_model_summary=False)
    >>> # trainer.fit(model, datamodule=dm); trainer.test(model, datamodule=dm)
    """

    def __init__(
        self,
        *,
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        num_nodes: int = 1,
        max_restarts: int = 0,
        strategy: str | Any = "auto",
        precision: str | int = "32-true",
        compile: bool | dict[str, Any] = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int = 2,
        log_every_n_steps: int = 50,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        callbacks: list[Callback] | Callback | None = None,
        logger: Any = True,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        enable_model_summary: bool = True,
        deterministic: bool = False,
        watchdog_timeout: float | None = DEFAULT_WATCHDOG_TIMEOUT,
        fast_dev_run: bool | int = False,
        inference_mode: bool = True,
        gpus: int | list[int] | None = None,
        distributed_backend: str | None = None,
        weights_summary: str | None = "top",
        num_tpu_cores: int | None = None,
    ) -> None:
        self.runtime, enable_model_summary = _build_runtime(accelerator=accelerator, devices=devices, strategy=strategy,
            precision=precision, compile=compile, num_nodes=num_nodes, max_restarts=max_restarts, gpus=gpus,
            num_tpu_cores=num_tpu_cores, enable_model_summary=enable_model_summary, watchdog_timeout=watchdog_timeout,
            distributed_backend=distributed_backend, weights_summary=weights_summary)
        self.default_root_dir, self.inference_mode = str(default_root_dir or os.getcwd()), inference_mode
        loop = check_loop_settings(
            fast_dev_run=fast_dev_run, max_epochs=max_epochs, min_epochs=min_epochs, max_steps=max_steps,
            limit_train_batches=limit_train_batches, limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches, limit_predict_batches=limit_predict_batches,
            val_check_interval=val_check_interval, check_val_every_n_epoch=check_val_every_n_epoch,
            num_sanity_val_steps=num_sanity_val_steps, log_every_n_steps=log_every_n_steps,
            accumulate_grad_batches=accumulate_grad_batches, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm, logger=logger, enable_checkpointing=enable_checkpointing,
        )
        self._adopt_loop_settings(loop)
        if deterministic:
            make_deterministic()
        self.loggers = _build_loggers(loop.logger, self.default_root_dir)
        self.callbacks = _build_callbacks(callbacks, progress_bar=enable_progress_bar, summary=enable_model_summary,
                                          checkpointing=loop.enable_checkpointing, fast_dev_run=bool(self.fast_dev_run))
        self._reset_run_state()

    def _adopt_loop_settings(self, loop: LoopSettings) -> None:
        """The checked loop settings as attributes: the loop, callbacks and users read them here."""
        self.fast_dev_run = loop.fast_dev_run
        self.max_steps = loop.max_steps
        self.max_epochs = loop.max_epochs
        self.min_epochs = loop.min_epochs
        self.limit_train_batches = loop.limit_train_batches
        self.limit_val_batches = loop.limit_val_batches
        self.limit_test_batches = loop.limit_test_batches
        self.limit_predict_batches = loop.limit_predict_batches
        self.val_check_interval = loop.val_check_interval
        self.check_val_every_n_epoch = loop.check_val_every_n_epoch
        self.num_sanity_val_steps = loop.num_sanity_val_steps
        self.log_every_n_steps = loop.log_every_n_steps
        self.accumulate_grad_batches = loop.accumulate_grad_batches
        self.gradient_clip_val = loop.gradient_clip_val
        self.gradient_clip_algorithm = loop.gradient_clip_algorithm

    def _reset_run_state(self) -> None:
        """Run state, read by callbacks and by the Module's properties."""
        self.current_epoch = 0
        self.global_step = 0
        self.should_stop = False
        self.sanity_checking = False
        self.stage: str | None = None
        # The checkpoint this run resumed (or loaded weights) from: ModelCheckpoint never deletes it.
        self.ckpt_path: str | None = None
        self.epoch_metrics: dict[str, float] = {}
        self.train_results: Any = None
        self._last_logged_step = -1
        self.logged_metrics: dict[str, torch.Tensor] = {}
        self.num_training_batches: int | float = 0
        self.num_val_batches: int = 0
        self.num_test_batches: int = 0
        self.num_predict_batches: int = 0
        self.module: Any = None
        self.model: Any = None
        self.datamodule: Any = None
        self.optimizers: list[Any] = []
        self.lr_scheduler_configs: list[SchedulerConfig] = []
        self.sink = MetricSink(self.runtime.all_reduce)
        self.hooks: HookDispatcher | None = None
        self.loop = fit_loop.LoopPosition()
        self._prepared_module_id: int | None = None

    # ---- where the run is ---------------------------------------------------------------------
    @property
    def strategy(self) -> Strategy:
        """The run's strategy object, for users' code that inspects it (the loop never does)."""
        return self.runtime.strategy

    @property
    def precision(self) -> str:
        return self.runtime.precision.name

    @property
    def global_rank(self) -> int:
        return self.runtime.global_rank

    @property
    def local_rank(self) -> int:
        return self.runtime.local_rank

    @property
    def world_size(self) -> int:
        return self.runtime.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.runtime.is_global_zero

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        return self.loggers[0].log_dir if self.loggers else self.default_root_dir

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest value of every logged metric (scalar tensors): epoch values, and this epoch's
        step values. Step values are handed out as the tensors logged, so reading them here
        costs no device sync either.
        """
        metrics = {name: metric_tensor(value) for name, value in self.epoch_metrics.items()}
        if self.train_results is not None:
            entries = self.train_results.entries
            for name, value in self.train_results.step_values.items():
                number = step_tensor(value)
                if entries[name].on_epoch:
                    metrics[f"{name}_step"] = number
                    if self.loop.batches_done and not self.loop.epoch_finished:
                        metrics[name] = number
                else:
                    metrics[name] = number
        return metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        shown: dict[str, Any] = {}  # read from the device together: one wait, not one per value
        loss = self.loop.last_loss
        if loss is not None and self.stage == "fit":
            shown["loss"] = loss
        if self.train_results is not None and self.stage == "fit":
            entries = self.train_results.entries
            for name, value in self.train_results.step_values.items():
                if entries[name].prog_bar:
                    shown[name] = value
        metrics = read_floats(shown)
        for name, value in self.epoch_metrics.items():
            if name in self._prog_bar_names:
                metrics.setdefault(name, value)
        return metrics

    @property
    def checkpoint_callback(self) -> Any:
        from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

        return next((cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)), None)

    @property
    def early_stopping_callback(self) -> Any:
        from trainmesh.callbacks.early_stopping import EarlyStopping

        return next((cb for cb in self.callbacks if isinstance(cb, EarlyStopping)), None)

    # ---- public entry points ------------------------------------------------------------------
    def fit(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
            datamodule: Any = None, ckpt_path: str | None = None) -> None:
        """Train ``model``; ``ckpt_path`` ("last" or a file) resumes a stopped run exactly."""
        data = DataSource.for_fit(model, train_dataloaders, val_dataloaders, datamodule)
        self._launch("fit", model, data, ckpt_path)

    def validate(self, model: Any = None, dataloaders: Any = None, datamodule: Any = None,
                 ckpt_path: str | None = None, verbose: bool = True) -> list[dict[str, float]]:
        """Run validation once; returns one dict of logged metrics per dataloader."""
        return self._evaluate("validate", model, dataloaders, datamodule, ckpt_path, verbose)

    def test(self, model: Any = None, dataloaders: Any = None, datamodule: Any = None,
             ckpt_path: str | None = None, verbose: bool = True) -> list[dict[str, float]]:
        """Run the test set once; returns one dict of logged metrics per dataloader."""
        return self._evaluate("test", model, dataloaders, datamodule, ckpt_path, verbose)

    def predict(self, model: Any = None, dataloaders: Any = None, datamodule: Any = None,
                ckpt_path: str | None = None) -> Any:
        """Run ``predict_step`` over the data; returns the outputs (a list per dataloader)."""
        model = self._model_or_last(model, "predict")
        data = DataSource.for_stage("predict", model, dataloaders, datamodule)
        return self._launch("predict", model, data, ckpt_path)

    def save_checkpoint(self, path: str | os.PathLike[str], weights_only: bool = False) -> None:
        """Write the full training state to ``path`` (atomically); with ``weights_only`` the
        weights and hyperparameters alone, which validate/test/predict load but fit cannot resume."""
        if self.module is None:
            raise RuntimeError("save_checkpoint() needs a model: call it during or after fit/validate/test")
        with self.runtime.supervision.paused():  # a save may legitimately take longer than a step
            verify_finite_losses(self, str(path))  # no checkpoint of weights a non-finite step produced
            checkpoint = build_checkpoint(self, weights_only=weights_only)
            # The strategy waits for every rank; one that shards writes each rank's shards.
            self.runtime.save_checkpoint(checkpoint, str(path), sharded=TENSOR_ENTRIES)

    # ---- internals ----------------------------------------------------------------------------
    def _evaluate(self, stage: str, model: Any, dataloaders: Any, datamodule: Any,
                  ckpt_path: str | None, verbose: bool) -> list[dict[str, float]]:
        model = self._model_or_last(model, stage)
        data = DataSource.for_stage(stage, model, dataloaders, datamodule)
        results = self._launch(stage, model, data, ckpt_path)
        if verbose and self.is_global_zero:
            evaluation.print_results(stage, results)
        return results

    def _launch(self, stage: str, model: Any, data: DataSource, ckpt_path: str | None) -> Any:
        self.runtime.choose_strategy(model)  # "auto" decides by the model's memory, before processes start
        outcome = self.runtime.launch(self._run, stage, model, data, ckpt_path)
        if isinstance(outcome, WorkerOutcome):  # the work ran in spawned processes
            return outcome.adopt(self, model)
        return outcome

    def _model_or_last(self, model: Any, stage: str) -> Any:
        if model is None:
            if self.module is None:
                raise ValueError(f"trainer.{stage}() needs a model: pass it, or call fit(model) first")
            return self.module
        return model

    def _run(self, stage: str, model: Any, data: DataSource, ckpt_path: str | None) -> Any:
        self.stage = stage
        status = "failed"
        try:
            self._prepare(model, data, stage)
            if stage == "fit":
                clear_interrupted_saves(self, ckpt_path)  # before this run saves anything
                # None: a fresh start ("last" before any checkpoint exists, too). With no ckpt_path,
                # a restart or the run after a preemption finds its checkpoint (supervision/preemption.py).
                source = (resume_source(self) if ckpt_path is None
                          else resolve_ckpt_path(self, ckpt_path, allow_fresh_start=True))
                self.ckpt_path = source
                checkpoint = None if source is None else self._read_checkpoint(source, with_optimizers=True)
                supervision = self.runtime.supervision  # SIGTERM/SIGUSR1: save and exit 75
                with supervision.stop_signals(self.runtime.process, folder=self.default_root_dir, save=self.save_checkpoint):
                    result = fit_loop.run_fit(self, data, checkpoint, source or "")
                    supervision.finish_fit(step=self.global_step, epoch=self.current_epoch)
            elif stage == "predict":
                self._load_weights_for_eval(ckpt_path)
                result = evaluation.run_predict(self, data)
            else:
                self._load_weights_for_eval(ckpt_path)
                result = evaluation.run_evaluation_stage(self, stage, data)
            status = "success"
            if self.runtime.reports_to_parent and self.is_global_zero:
                return WorkerOutcome.capture(self, result)
            return result
        except KeyboardInterrupt as exc:
            status = "interrupted"
            rank_zero_info("\nInterrupted: stopping; checkpoints already written are complete and usable.")
            self._on_exception(exc)
            raise
        except BaseException as exc:
            self._on_exception(exc)
            raise
        finally:
            self._finish(data, stage, status)

    def _prepare(self, model: Any, data: DataSource, stage: str) -> None:
        from trainmesh.module import Module, call_configure_model

        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"the model must be a trainmesh.Module (a torch.nn.Module), got {type(model).__name__}")
        self.module = model
        self.datamodule = data.datamodule
        self.sink = MetricSink(self.runtime.all_reduce)
        self.train_results = None
        self._prog_bar_names: set[str] = set()
        if isinstance(model, Module):
            model.attach(self, self.sink)
        data.prepare(self, stage)
        if self.world_size > 1:
            for logger in self.loggers:
                logger.agree_on_version(self.runtime.broadcast)
        self.hooks = HookDispatcher(self, model, self.callbacks)
        self.hooks.call_module("setup", stage)
        self.hooks.call_callbacks("setup", stage)
        if self._prepared_module_id != id(model):
            # configure_model and placement run once per model object, so fit-then-test keeps
            # the trained (wrapped) model instead of wrapping it a second time.
            if hasattr(model, "configure_model"):
                with self.runtime.module_init_context():
                    call_configure_model(model, self.runtime.mesh)
            self.model = self.runtime.setup_module(model)
            self._prepared_module_id = id(model)
            self.optimizers, self.lr_scheduler_configs = [], []
        self.sink.from_logging_ranks = self.runtime.from_logging_ranks
        if stage == "fit" and not self.optimizers:
            optimizers, self.lr_scheduler_configs = parse_optimizers(model.configure_optimizers(), type(model).__name__)
            self.optimizers = self.runtime.setup_optimizers(*optimizers)
            _point_schedulers_at(self.lr_scheduler_configs, optimizers, self.optimizers)

    def _load_weights_for_eval(self, ckpt_path: str | None) -> None:
        if ckpt_path is None:
            return
        source = self.ckpt_path = resolve_ckpt_path(self, ckpt_path)
        restore_checkpoint(self, self._read_checkpoint(source, with_optimizers=False), source=source, weights_only=True)

    def _read_checkpoint(self, source: str, *, with_optimizers: bool) -> dict[str, Any]:
        optimizers = self.optimizers if with_optimizers else []
        return self.runtime.load_checkpoint(source, self.model, optimizers, keys=TENSOR_ENTRIES)

    def _on_exception(self, exc: BaseException) -> None:
        if self.hooks is not None:
            for callback in self.hooks.callbacks_for("on_exception"):
                try:
                    callback.on_exception(self, self.module, exc)
                except Exception:  # the original error matters more than a callback's
                    pass

    def _finish(self, data: DataSource, stage: str, status: str) -> None:
        if self.hooks is not None:
            self.hooks.call_callbacks("teardown", stage)
            self.hooks.call_module("teardown", stage)
        data.teardown(stage)
        if self.is_global_zero:
            for logger in self.loggers:
                logger.finalize(status)

    # ---- used by the loops --------------------------------------------------------------------
    def publish_epoch_metrics(self, metrics: dict[str, tuple[float, Any]], *, suffix: str = "", to_logger: bool = True) -> dict[str, float]:
        """Put reduced epoch metrics into callback_metrics (and the loggers); returns them."""
        published: dict[str, float] = {}
        for name, (value, entry) in metrics.items():
            key = f"{name}{suffix}"
            published[key] = value
            self.epoch_metrics[key] = value
            if entry.on_step:
                self.epoch_metrics[f"{name}_epoch{suffix}"] = value
            if entry.prog_bar:
                self._prog_bar_names.add(key)
            if entry.logger:
                self.logged_metrics[f"{name}_epoch{suffix}" if entry.on_step else key] = metric_tensor(value)
        if to_logger:
            logged = {(f"{n}_epoch{suffix}" if e.on_step else f"{n}{suffix}"): v for n, (v, e) in metrics.items() if e.logger}
            self.log_to_loggers({**logged, "epoch": float(self.current_epoch)})
        return published

    def publish_step_metrics(self) -> None:
        """Send the step values to the loggers, once per optimizer step at most."""
        if self._last_logged_step == self.global_step or not self.loggers:
            return
        self._last_logged_step = self.global_step
        logged = self.sink.step_metrics(logger_only=True)
        self.logged_metrics.update({name: metric_tensor(value) for name, value in logged.items()})
        if logged:
            self.log_to_loggers({**logged, "epoch": float(self.current_epoch)})

    def log_to_loggers(self, metrics: dict[str, float]) -> None:
        if self.loggers and self.is_global_zero and not self.sanity_checking:
            for logger in self.loggers:
                logger.log_metrics(metrics, step=self.global_step)


def _point_schedulers_at(configs: list[SchedulerConfig], given: list[Any], prepared: list[Any]) -> None:
    """A strategy may replace an optimizer (zero1 shards its state): schedulers follow it."""
    for old, new in zip(given, prepared):
        inner = getattr(new, "optimizer", new)
        if inner is not old:
            for config in configs:
                if getattr(config.scheduler, "optimizer", None) is old:
                    config.scheduler.optimizer = inner


def _build_runtime(*, accelerator: str, devices: int | str | list[int], strategy: str | Any, precision: str | int,
                   compile: bool | dict[str, Any], num_nodes: int, max_restarts: int, enable_model_summary: bool,
                   gpus: int | list[int] | None, distributed_backend: str | None, weights_summary: str | None,
                   num_tpu_cores: int | None, watchdog_timeout: float | None) -> tuple[Runtime, bool]:
    """The Runtime the arguments describe (its watchdog's timeout checked and set), and enable_model_summary
    (the seeds' weights_summary sets it too)."""
    # The seeds' Lightning 1.x spellings (gpus=2, accelerator="dp", ...) become today's.
    settings = seed_spellings.translate(
        accelerator=accelerator, devices=devices, strategy=strategy, enable_model_summary=enable_model_summary,
        gpus=gpus, distributed_backend=distributed_backend, weights_summary=weights_summary,
        num_tpu_cores=num_tpu_cores,
    )
    runtime = Runtime(accelerator=settings.accelerator, devices=settings.devices, strategy=settings.strategy,
                      precision=precision, num_nodes=num_nodes, max_restarts=max_restarts, compile=compile)
    runtime.supervision.set_watchdog_timeout(watchdog_timeout)  # supervision/watchdog.py
    return runtime, settings.enable_model_summary


def _build_loggers(logger: Any, root: str) -> list[Any]:
    if logger is False or logger is None:
        return []
    if logger is True:
        from trainmesh.loggers.csv_logger import CSVLogger

        return [CSVLogger(root, name="trainmesh_logs")]
    if isinstance(logger, Iterable) and not isinstance(logger, (str, bytes)):
        return list(logger)
    return [logger]


def _build_callbacks(callbacks: Any, *, progress_bar: bool, checkpointing: bool, summary: bool,
                     fast_dev_run: bool) -> list[Callback]:
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

