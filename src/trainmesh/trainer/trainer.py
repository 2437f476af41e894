"""Trainer: the loop (epochs, steps, hooks, logging, checkpoint cadence) over a Runtime."""

from __future__ import annotations

import functools
import inspect
import os
import weakref
from datetime import timedelta
from typing import Any, Literal

import torch

from trainmesh.callbacks.timer import with_max_time
from trainmesh.checkpoint import remove_checkpoint
from trainmesh.runtime import Strategy
from trainmesh.seed import make_deterministic
from trainmesh.trainer import construction, evaluation, fit_loop, own_saves
from trainmesh.trainer.batch_limit_notes import batch_limit_notes, say_batch_limit_notes
from trainmesh.trainer.checkpoint_paths import (
    clear_interrupted_saves,
    evaluation_ckpt_path,
    evaluation_places,
    program_ckpt_path,
    save_arguments,
)
from trainmesh.trainer.checkpointing import write_checkpoint
from trainmesh.trainer.construction import (
    LIGHTNING1_ARGUMENTS,
    accumulation_argument,
    build_callbacks,
    build_loggers,
    build_runtime,
    extend_users_list,
    with_accumulation_scheduler,
)
from trainmesh.trainer.construction_lines import said_once_per_run
from trainmesh.trainer.constructor_arguments import lightning_arguments
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.finder_runs import refuse_several_processes
from trainmesh.trainer.loop_progress import LoopCounters
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.overfit import for_overfit, overfit_limits
from trainmesh.trainer.peer_state import check_fault_tolerant_limits
from trainmesh.trainer.prediction_loop import PredictLoop
from trainmesh.trainer.profiling import build_profiler
from trainmesh.trainer.results import LogCollector
from trainmesh.trainer.results_table import print_results
from trainmesh.trainer.resume import (
    StageCheckpoints,
    owned_by,
    read_fit_checkpoint,
    say_restoring,
    select_named_last,
    watch_preemption,
)
from trainmesh.trainer.search_trials import TunerExit
from trainmesh.trainer.settings import check_loop_settings, settle_limits, whole_count
from trainmesh.trainer.stage_end import HOOK_RAISED, finish_stage, on_spawned_exception, on_stage_failure
from trainmesh.trainer.stage_requirements import check_before_launch, refuse_missing_steps
from trainmesh.trainer.stage_setup import prepare_stage
from trainmesh.trainer.states import begin_run
from trainmesh.trainer.trainer_fields import TrainerFields
from trainmesh.utilities import docstrings
from trainmesh.utilities.exceptions import MissingModel
from trainmesh.utilities.filesystem import local_path
from trainmesh.utilities.lazy import is_instance

_LOOP_SETTINGS = frozenset(inspect.signature(check_loop_settings).parameters)


class Trainer(TrainerFields, construction.LightningOneMembers):  # fields; RunProperties; 1.x's members
    __doc__ = docstrings.TRAINER  # Args and Examples; the file is near 500 lines

    @said_once_per_run  # not again by a worker of trainmesh's agent (construction_lines.py)
    @lightning_arguments  # PL_TRAINER_* defaults, mistyped keywords, barebones=True (constructor_arguments.py)
    def __init__(
        self,
        *,
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        num_nodes: int = 1,
        max_restarts: int = 0,
        exact_resume: bool = False,
        strategy: str | Any = "auto",
        precision: str | int | None = None,
        compile: bool | dict[str, Any] = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        min_steps: int | None = None,
        max_steps: int = -1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        val_check_interval: int | float | str | timedelta | dict[str, int] | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int = 2,
        log_every_n_steps: int = 50,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        callbacks: list[Any] | Any = None,
        logger: Any = True,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        enable_model_summary: bool = True,
        deterministic: bool = False,
        watchdog_timeout: float | Literal["auto"] | None = "auto",
        fast_dev_run: bool | int = False,
        inference_mode: bool = True,
        gpus: int | list[int] | None = None,
        distributed_backend: str | None = None,
        weights_summary: str | None = "top",
        num_tpu_cores: int | None = None,
        fault_tolerance: Any = None,
        plugins: Any = None,
        profiler: Any = None,
        max_time: Any = None,
        overfit_batches: int | float = 0.0,
        sync_batchnorm: bool = False,
        auto_select_gpus: bool = False,
        tpu_cores: Any = None,
        ipus: Any = None,
        num_processes: int | None = None,
        amp_backend: str | None = None,
        amp_level: str | None = None,
        auto_lr_find: bool | str = False,
        auto_scale_batch_size: bool | str = False,
        track_grad_norm: int | float | str = -1,
        replace_sampler_ddp: bool = True,
        resume_from_checkpoint: str | os.PathLike[str] | None = None,
        move_metrics_to_cpu: bool = False,
        multiple_trainloader_mode: str = "max_size_cycle",
        benchmark: bool | None = None,
        use_distributed_sampler: bool = True,
        detect_anomaly: bool = False,
        barebones: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
    ) -> None:
        self._lightning1 = construction.lightning_one_run(locals())  # 1.x's arguments (lightning1/)
        self.barebones = barebones
        self._exact_resume = construction.exact_resume_argument(exact_resume)  # trainmesh's own (not Lightning's)
        # benchmark, detect_anomaly, ...: checked as Lightning checks them (lightning2_arguments.py)
        self._behaviour = construction.run_behaviour(locals())
        self.runtime, enable_model_summary, self._layer_sync = build_runtime(
            plugins=plugins,
            sync_batchnorm=sync_batchnorm,
            lightning1={name: value for name, value in locals().items() if name in LIGHTNING1_ARGUMENTS},
            fault_tolerance=fault_tolerance,
            accelerator=accelerator,
            devices=devices,
            strategy=strategy,
            precision=precision,
            compile=compile,
            num_nodes=num_nodes,
            max_restarts=max_restarts,
            gpus=gpus,
            num_tpu_cores=num_tpu_cores,
            enable_model_summary=enable_model_summary,
            watchdog_timeout=watchdog_timeout,
            distributed_backend=distributed_backend,
            weights_summary=weights_summary,
        )
        # the program's accelerator object is the run's (trainer.accelerator, lightning_members.py)
        self._accelerator_object = None if isinstance(accelerator, str) else accelerator
        default_root_dir = local_path(default_root_dir, "Trainer(default_root_dir)")
        # Lightning's trainer.default_root_dir: "~" expanded, the path normalized
        self.default_root_dir = os.path.normpath(os.path.expanduser(str(default_root_dir or os.getcwd())))
        notes = batch_limit_notes(locals())  # Lightning's lines for limits given as 1 or 1.0, said below
        self.overfit_batches = whole_count(overfit_batches)  # fit's loaders in order, limited (overfit.py)
        limit_train_batches, limit_val_batches = overfit_limits(overfit_batches, limit_train_batches, limit_val_batches)
        max_epochs_given = max_epochs is not None  # trainer.max_epochs reads None until a fit settles it
        users_list = callbacks  # Lightning adds its callbacks to a list given (extend_users_list)
        callbacks, max_epochs = with_max_time(callbacks, max_time, max_epochs, max_steps)  # callbacks/timer.py
        accumulate_grad_batches, scheduling = accumulation_argument(callbacks, accumulate_grad_batches)  # 1.x's dict
        # the loop's settings are the arguments of check_loop_settings' names (max_epochs and the two
        # limits as overfit_batches and max_time left them above)
        self._settings = loop = check_loop_settings(**{n: v for n, v in locals().items() if n in _LOOP_SETTINGS})
        check_fault_tolerant_limits(fault_tolerance, max_steps=max_steps, max_epochs=max_epochs)
        self._fault_tolerant, self.inference_mode = fault_tolerance is not None, inference_mode
        self.profiler = build_profiler(profiler)  # "simple" | "advanced" | "pytorch" | a Profiler (profiling.py)
        if deterministic:
            make_deterministic()
        self.loggers = build_loggers(logger, self.default_root_dir, fast_dev_run=bool(loop.fast_dev_run))
        bars = {"progress_bar": enable_progress_bar, "summary": enable_model_summary}
        self.callbacks = build_callbacks(callbacks, loop, **bars, enable_checkpointing=enable_checkpointing)
        if scheduling is not None or self._lightning1.spelled:  # 1.9.5's in every Trainer (lightning1/accumulation.py)
            self.callbacks = with_accumulation_scheduler(self.callbacks, scheduling or accumulate_grad_batches)
        # after the scheduler: 1.9.5 appends it to the program's list too, after the summary
        extend_users_list(users_list, self.callbacks)
        # loop_state.py: the properties below read it
        self._state = self._new_loop_state()
        construction.log_device_info(self.runtime)  # Lightning's "GPU available: ..." lines, last as its
        say_batch_limit_notes(notes)

    @property
    def strategy(self) -> Strategy:
        """The run's strategy object, for users' code that inspects it (the loop never does)."""
        return self.runtime.trainer_port.strategy_serving(weakref.ref(self))  # its optimizers: this Trainer's

    # ---- public entry points ------------------------------------------------------------------
    def fit(
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        ckpt_path: str | None = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train ``model``; ``ckpt_path`` ("last", "best", "hpc" or a file) resumes as Lightning 2.6 does: the position, weights and
        optimizers, the loader read afresh (``Trainer(exact_resume=True)``: the rest of the saved epoch with its
        generators; ``weights_only``: Lightning's, as ``torch.load`` takes it: None is torch's default)."""
        model = self.runtime.trainer_port.uncompiled(model)  # torch.compile(m): m, compiled where the strategy compiles
        self._settings = settle_limits(self._settings)  # Lightning's _parse_loop_limits: max/min_epochs read settled
        refuse_several_processes(self, self.runtime)  # the finder callbacks search inside the fit (finder_runs.py)
        data = DataSource.for_fit(model, train_dataloaders, val_dataloaders, datamodule)
        data = for_overfit(data, self.overfit_batches)
        ckpt_path = program_ckpt_path(self._state, ckpt_path)[0]  # a trainer.ckpt_path the program set
        ckpt_path = construction.lightning_one_fit(self, data, ckpt_path)  # Lightning 1.x's (lightning1/)
        self._launch("fit", model, data, ckpt_path, weights_only)

    def validate(
        self,
        model: Any = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run validation once; returns one dict of logged metrics per dataloader."""
        return self._evaluate("validate", model, dataloaders, datamodule, (ckpt_path, weights_only), verbose)

    def test(
        self,
        model: Any = None,
        dataloaders: Any = None,
        ckpt_path: str | None = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run the test set once; returns one dict of logged metrics per dataloader."""
        return self._evaluate("test", model, dataloaders, datamodule, (ckpt_path, weights_only), verbose)

    def predict(
        self,
        model: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        return_predictions: bool | None = None,
        ckpt_path: str | None = None,
        weights_only: bool | None = None,
    ) -> Any:
        """Run ``predict_step`` over the data; returns the outputs (a list per dataloader), or None
        with ``return_predictions=False`` (Lightning's arguments, in its order)."""
        ckpt_path = self._evaluation_ckpt_path("predict", model, ckpt_path)
        model = self._model_or_last(model, "predict")
        data = DataSource.for_stage("predict", model, dataloaders, datamodule)
        self._state.predict_loop.return_predictions = return_predictions  # decided (and refused) there
        keep = self._state.predict_loop.return_predictions  # else none kept, as Lightning
        outputs = self._launch("predict", model, data, ckpt_path, weights_only)
        return outputs if keep else None

    def _new_loop_state(self) -> LoopState:
        decide = self.runtime.trainer_port.returns_predictions  # trainer.predict_loop.return_predictions = x
        counters = LoopCounters()  # (the predict loop reads its own, trainer.predict_loop.batch_progress)
        predict_loop = PredictLoop(decide=decide, counters=counters.predict)
        return LoopState(
            log_collector=LogCollector(self.runtime.all_reduce), progress=counters, predict_loop=predict_loop
        )

    def save_checkpoint(
        self, filepath: str | os.PathLike[str], weights_only: bool | None = None, storage_options: Any = None
    ) -> None:
        """Write the training state to ``filepath`` (atomically); ``weights_only``: the weights and hyperparameters
        alone (fit cannot resume from them); ``storage_options`` refused, as by Lightning's default checkpoint IO."""
        self._save_checkpoint(filepath, weights_only=save_arguments(weights_only, storage_options))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The trained model's whole weights on rank 0 (``{name: CPU tensor}``, the names of one
        process's ``model.state_dict()``), from any strategy; ``None`` on the other ranks. Every
        rank must call it (not under ``if trainer.is_global_zero:``): under fsdp, tp or a pipeline
        it gathers the pieces from every rank."""
        if self.model is None:
            raise RuntimeError("full_state_dict() needs a model: call it during or after fit/validate/test")
        with self.runtime.supervision.paused():  # gathering a large model may take longer than a step
            return self.runtime.checkpoints.full_state_dict(self.model)

    def _save_checkpoint(self, path: str | os.PathLike[str], *, weights_only: bool = False) -> None:
        if self.module is None:
            raise RuntimeError("save_checkpoint() needs a model: call it during or after fit/validate/test")
        with self.runtime.supervision.paused(), self.profiler.profile("save_checkpoint"):
            write_checkpoint(self._state, self.runtime, self, str(path), weights_only=weights_only)
        own_saves.remember(path)  # a restart of this process resumes an earlier attempt's files only

    def remove_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Delete a checkpoint; with AsyncCheckpointIO once the save in flight is complete, if it succeeded."""
        self.runtime.checkpoints.saves.after_save(functools.partial(remove_checkpoint, path))

    # ---- internals ----------------------------------------------------------------------------
    def _evaluate(
        self, stage: str, model: Any, dataloaders: Any, datamodule: Any, ckpt: tuple[Any, Any], verbose: bool
    ) -> list[dict[str, float]]:
        ckpt = (self._evaluation_ckpt_path(stage, model, ckpt[0]), ckpt[1])
        model = self._model_or_last(model, stage)
        data = DataSource.for_stage(stage, model, dataloaders, datamodule)
        results: list[dict[str, float]] = self._launch(stage, model, data, *ckpt)
        if verbose and self.is_global_zero:
            print_results(stage, results)
        return results

    def _evaluation_ckpt_path(self, stage: str, model: Any, ckpt_path: Any) -> Any:
        ckpt_path, programs = program_ckpt_path(self._state, ckpt_path)  # a trainer.ckpt_path the program set
        return ckpt_path if programs else evaluation_ckpt_path(self, stage, model, ckpt_path)

    def _launch(
        self, stage: str, model: Any, data: DataSource, ckpt_path: str | None, weights_only: bool | None = None
    ) -> Any:
        check_before_launch(
            model, stage, ckpt_given=ckpt_path is not None, has_val_loaders=lambda: data.defines("validate")
        )
        self.runtime.trainer_port.choose_strategy(model)  # "auto" decides by the model's memory, before processes start
        try:
            outcome = self.runtime.launch(self._run, stage, model, data, ckpt_path, weights_only)
        except BaseException as exc:
            if is_instance(self.runtime.launcher, "trainmesh.launchers.spawn", "SpawnLauncher"):
                on_spawned_exception(self, exc, model, data.datamodule)  # the workers called none
            raise
        if is_instance(
            outcome, "trainmesh.trainer.worker_outcome", "WorkerOutcome"
        ):  # the work ran in spawned processes
            return outcome.adopt(self._state, self, model)
        return outcome

    def _model_or_last(self, model: Any, stage: str) -> Any:
        if model is None:
            if self.module is None:
                raise MissingModel(  # Lightning's words, then how
                    f"`Trainer.{stage}()` requires a `LightningModule` when it hasn't been passed in a previous run:"
                    " pass it, or call fit(model) first"
                )
            return self.module
        return self.runtime.trainer_port.uncompiled(model)

    def _run(self, stage: str, model: Any, data: DataSource, ckpt_path: str | None, weights_only: bool | None) -> Any:
        state = self._state
        state.stage = stage
        self._behaviour.apply_torch_flags()  # again here: a spawned process starts with torch's defaults
        begin_run(state.trainer_state, stage)  # Lightning's trainer.state and .training, ... (states.py)
        status = "failed"
        early: list[Any] = []  # (source, checkpoint) of a fit restored before configure_optimizers
        try:
            # a ckpt_path the program names resumes as Lightning's does; exact_resume=True: exactly
            state.named_resume = stage == "fit" and ckpt_path is not None and not self._exact_resume
            ckpt_path = select_named_last(self, self.runtime, ckpt_path, model)  # (a fit's "last": before its set-up)
            checkpoints = StageCheckpoints(self, self.runtime, state, weights_only, evaluation_places(self, ckpt_path))
            restore = functools.partial(checkpoints.restore_early, ckpt_path, early)
            loop = prepare_stage(self, model, data, stage, restore if stage == "fit" else None)
            if stage == "fit":
                # None: a fresh start ("last" before any checkpoint exists, too). With no ckpt_path,
                # a restart or the run after a preemption finds its checkpoint (supervision/preemption.py).
                # "last" and the automatic resume fall back past a damaged checkpoint (trainer/resume.py).
                clear_interrupted_saves(self, ckpt_path)  # before this run saves anything
                read = functools.partial(checkpoints.read, with_optimizers=True)
                source, checkpoint = early[0] if early else read_fit_checkpoint(self, self.runtime, ckpt_path, read)
                if not early and source is not None:  # restored after configure_optimizers (a sharded one)
                    say_restoring(source)
                state.ckpt_path = source
                supervision = self.runtime.supervision  # SIGTERM/SIGUSR1: save and exit 75
                with watch_preemption(self, self.runtime, state.module, save=self._save_on_stop):
                    saves = self.runtime.checkpoints.saves
                    with saves.in_background(model=state.model, optimizers=state.optimizers):
                        fit_loop.run_fit(loop, checkpoint, source or "")
                    result = None
                    supervision.finish_fit(
                        step=self.global_step, epoch=self.current_epoch, owned=owned_by(state.module)
                    )
            elif stage == "predict":
                checkpoints.load_weights_for_eval(ckpt_path)
                result = evaluation.run_predict(loop, data)
            else:
                checkpoints.load_weights_for_eval(ckpt_path)
                refuse_missing_steps(model, stage)
                result = evaluation.run_evaluation_stage(loop, stage, data)
            status = "success"
            if self.runtime.process.reports_to_parent and self.is_global_zero:
                from trainmesh.trainer.worker_outcome import WorkerOutcome  # a spawned worker's report

                return WorkerOutcome.capture(self, result)
            return result
        except TunerExit:  # the Tuner's search is over: the teardown hooks, as Lightning's
            status = "success"
            return None
        except BaseException as exc:
            status = HOOK_RAISED  # until the on_exception hooks return (stage_end.py)
            status, raised = on_stage_failure(self, exc)
            raise raised  # noqa: B904  # the run's own, or Ctrl-C's SystemExit(1) (its context the interrupt)
        finally:
            finish_stage(self, data, stage, status)

    def _save_on_stop(self, path: str) -> None:
        """The checkpoint a stop signal (SIGTERM/SIGUSR1) saves (supervision/preemption.py)."""
        self._save_checkpoint(path)
        self.runtime.checkpoints.saves.finish()  # saved before the exit says so
