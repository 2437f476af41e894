"""A stage's set-up before its loop (``fit``, ``validate``, ``test``, ``predict``), in Lightning's
order: the model attached and the model's callbacks merged, ``prepare_data`` and the ``setup``
hooks, the model placed (once per model object), then for ``fit`` its data and optimizers; and the
``LoopContext`` the stage's loop runs with."""

from __future__ import annotations

import functools
import os
import weakref
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.module import Module
from trainmesh.trainer import run_identity
from trainmesh.trainer.batch_transfer import choose_batch_hooks
from trainmesh.trainer.construction import configure_run_optimizers, merge_model_callbacks, with_accumulation_scheduler
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.manual_optimization import ManualSteps, check_manual_settings, is_manual
from trainmesh.trainer.model_placement import configure_placed_model, place_model
from trainmesh.trainer.profiling import hook_dispatcher, setup_profiler
from trainmesh.trainer.publishing import Publisher
from trainmesh.trainer.results import LogCollector
from trainmesh.trainer.states import hook_stage
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from trainmesh.trainer.stage_trainer import StageTrainer


# Lightning's SLURM line comes from its signal connector's logger, on every rank
_signals_log = lightning_named_logger("trainmesh.trainer.connectors.signal_connector")


def prepare_stage(
    trainer: StageTrainer, model: Any, data: DataSource, stage: str, early: functools.partial[bool] | None
) -> LoopContext:
    """What a stage does before its loop, in Lightning's order: the model attached, the callbacks merged,
    ``prepare_data`` and ``setup``, the model placed once, the fit's data and optimizers."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"the model must be a trainmesh.Module (a torch.nn.Module), got {type(model).__name__}")
    state, runtime = trainer._state, trainer.runtime
    if trainer.barebones:  # Lightning's line as its _run starts: no progress bar can look like a hang
        rank_zero_info(
            "`Trainer(barebones=True)` started running. The progress bar is disabled so you might want to"
            " manually print the progress in your model."
        )
    if stage == "fit" and is_manual(model):
        # Checked first, as Lightning validates its configuration: a strategy that cannot run
        # manual optimization (a pipeline) says why, before placing the model fails otherwise.
        check_manual_settings(runtime.strategy_name, runtime.capabilities, trainer._settings, model)
    state.module = model
    run_identity.stage_started(stage)  # which fit of this process its checkpoints record (before any resume)
    if data.datamodule is not None:  # a run without one keeps the last (Lightning's trainer.datamodule)
        state.datamodule = data.datamodule
    state.log_collector = LogCollector(runtime.all_reduce)
    state.log_collector.barebones = trainer.barebones
    state.start_run_metrics()
    if isinstance(model, Module):
        model._tm_attach(trainer, state.log_collector)
    state.hooks = None  # a hook refused below leaves no earlier run's hooks to call
    # Lightning's order: the model's callbacks join the Trainer's, then prepare_data, then setup.
    trainer.callbacks = _stage_callbacks(trainer, model)
    runtime.trainer_port.reseed_for_run()  # Lightning's DDP/FSDP setup_environment: reset_seed()
    setup_profiler(trainer.profiler, stage, trainer, model, trainer.log_dir)
    hooks = state.hooks = hook_dispatcher(
        trainer, model, trainer.callbacks, trainer.profiler
    )  # refuses what it cannot call
    data.prepare(trainer, stage)
    if trainer.world_size > 1:
        for logger in trainer.loggers:
            logger.agree_on_version(runtime.broadcast)
    for logger in trainer.loggers:  # Lightning's setup makes each one's experiment (TensorBoard's folder, file)
        getattr(logger, "experiment", None)
    # Lightning's order: the data module's setup (in data.prepare), the callbacks', the module's (stage=: its way)
    hooks.call_callbacks("setup", stage=hook_stage(stage))
    hooks.call_module("setup", stage=hook_stage(stage))
    _place_model(trainer, model, hooks, stage)
    state.log_collector.metrics_source = runtime.trainer_port.metrics_source
    state.log_collector.world_size = runtime.world_size  # sync_dist reduces with more than one process
    restored = early is not None and early()  # a resumed fit's module, in Lightning's order (trainer/resume.py)
    ctx = loop_context(trainer, model, data, hooks, restored)
    # Before configure_optimizers: trainer.estimated_stepping_batches may ask for the loader. Another
    # stage points the fit's data at its own module or data module, as Lightning's attach_dataloaders:
    # the estimate read after it asks their train_dataloader again.
    fit_source = data if stage == "fit" else _fit_source_of(stage, data, model, trainer._written_for_lightning1)
    state.fit_data = FitData(ctx, fit_source)
    if stage == "fit":  # every fit, as Lightning's: a second fit of the same model starts fresh optimizers
        configure_run_optimizers(
            state, runtime, hooks, fault_tolerant=trainer._fault_tolerant, profiler=trainer.profiler
        )
    state.manual_steps = ManualSteps(state, runtime)
    if "SLURM_NTASKS" in os.environ and _under_slurm():  # SIGUSR1 requeues (supervision/preemption.py)
        _signals_log.info("SLURM auto-requeueing enabled. Setting signal handlers.")
    return ctx


def _stage_callbacks(trainer: StageTrainer, model: Any) -> list[Any]:
    """The Trainer's callbacks with the model's (``configure_callbacks``); in a 1.x run, with the
    ``GradientAccumulationScheduler`` 1.9.5 lists in every Trainer (lightning1/accumulation.py)."""
    callbacks = merge_model_callbacks(trainer.callbacks, model)
    if trainer._written_for_lightning1:
        return with_accumulation_scheduler(callbacks, trainer.accumulate_grad_batches)
    return callbacks


def _fit_source_of(stage: str, data: DataSource, model: Any, lightning1: bool) -> DataSource:
    """The fit's data as another stage leaves it. pytorch-lightning 1.9's attach_dataloaders points the
    fit's validation at the loaders ``trainer.validate(model, loaders)`` was given (so that
    ``trainer.enable_validation`` is True during and after it, with no ``val_dataloader`` of the
    module's); 2.x's validate has its own loop and leaves the fit's data on the module. ``lightning1``: the
    run is 1.x's (its module's hooks or its Trainer's spelling)."""
    given = {}
    if stage == "validate" and "validate" in data.given and lightning1:
        given["validate"] = data.given["validate"]
    return DataSource(datamodule=data.datamodule, model=model, given=given, trainer_fn="fit")


def _place_model(trainer: StageTrainer, model: Any, hooks: HookDispatcher, stage: str) -> None:
    """The model placed, and its precision's autocast chosen for its Lightning generation. configure_model
    and placement run once per model object, so fit-then-test keeps the trained (wrapped) model instead
    of wrapping it a second time; Lightning calls configure_model again at every later stage."""
    state, runtime = trainer._state, trainer.runtime
    lightning1 = trainer._written_for_lightning1  # (the module's hooks or the Trainer's 1.x spelling)
    runtime.trainer_port.follow_run_generation(lightning1)  # (ddp's find_unused_parameters default)
    if state.prepared_module_id != id(model):
        state.model = place_model(model, runtime, hooks, trainer._layer_sync if stage == "fit" else None)
        state.prepared_module_id = id(model)
        state.optimizers, state.lr_scheduler_configs = [], []
    else:
        configure_placed_model(model, runtime, hooks)
    runtime.precision.follow_module_generation(lightning1)
    for logger in trainer.loggers:  # (metrics.csv's header order is the generation's too)
        if isinstance(logger, CSVLogger):
            logger._follow_module_generation(lightning1)


def loop_context(
    trainer: StageTrainer, model: Any, data: DataSource, hooks: HookDispatcher, restored: bool
) -> LoopContext:
    """The stage's loop context: the Trainer's state, settings and runtime with this stage's hooks."""
    behaviour = trainer._behaviour
    # The strategy's Lightning optimizers are this Trainer's from the stage's start, as Lightning's
    # strategy holds them from its setup: a subclass's load_optimizer_state_dict reads them in a resume.
    trainer.runtime.trainer_port.strategy_serving(weakref.ref(trainer))
    return LoopContext(
        state=trainer._state,
        settings=trainer._settings,
        runtime=trainer.runtime,
        hooks=hooks,
        publisher=Publisher(trainer._state, trainer.loggers, is_global_zero=trainer.is_global_zero),
        view=trainer,
        inference_mode=trainer.inference_mode,
        batch_hooks=choose_batch_hooks(model, data.datamodule),
        modules_restored=restored,
        profiler=trainer.profiler,
        use_distributed_sampler=behaviour.use_distributed_sampler,
        shuffle_training=not trainer.overfit_batches,
        wrap_samplers=trainer._written_for_lightning1,
        lightning1=trainer._written_for_lightning1,
        reload_every_n_epochs=behaviour.reload_dataloaders_every_n_epochs,
        detect_anomaly=behaviour.detect_anomaly,
        log_hyperparams=behaviour.enable_autolog_hparams,
    )


def _under_slurm() -> bool:
    """Lightning's ``SLURMEnvironment.detect()``; imported here, where SLURM's variables are set, so
    that a run outside SLURM does not import the plugins package (tests/test_import.py)."""
    from trainmesh.plugins.environments import SLURMEnvironment

    return bool(SLURMEnvironment.detect())
