"""What the Trainer is built from: its Runtime, loggers and callbacks, from the constructor's
arguments (the seeds' Lightning 1.x spellings translated), and the schedulers' link to their
optimizers once a strategy has prepared them."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from trainmesh.accelerators import resolve_accelerator
from trainmesh.callbacks.base import Callback, refuse_shared_state_keys
from trainmesh.callbacks.checkpoint import Checkpoint
from trainmesh.runtime import Runtime
from trainmesh.trainer.hooks import is_callback
from trainmesh.trainer.lightning1 import legacy_arguments
from trainmesh.trainer.lightning1.legacy_arguments import OLD_ARGUMENTS, in_todays_spelling
from trainmesh.trainer.lightning1.trainer_arguments import (
    LIGHTNING1_ARGUMENTS,
    accumulation_argument,
    distributed_sampler,
    hardware_arguments,
    strategy_argument,
)
from trainmesh.trainer.lightning1.trainer_members import (
    LightningOneMembers,
    apply_epoch_factor,
    lightning_one_fit,
    lightning_one_run,
    with_accumulation_scheduler,
)
from trainmesh.trainer.lightning2_arguments import RunBehaviour, check_run_behaviour
from trainmesh.trainer.manual_optimization import is_manual
from trainmesh.trainer.optimizers import SchedulerConfig, optimizer_frequencies, parse_optimizers
from trainmesh.trainer.peer_state import share_loop_state
from trainmesh.trainer.plugins_argument import sort_plugins
from trainmesh.trainer.precision_flag import choose_precision, unified_precision
from trainmesh.trainer.several_optimizers import refuse_several_automatic
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.rank_zero import rank_zero_info

# Lightning 1.x's Trainer arguments: the CLI reaches them through this door (docs/architecture.md rule 10).
__all__ = [
    "OLD_ARGUMENTS",
    "accumulation_argument",
    "apply_epoch_factor",
    "build_callbacks",
    "build_loggers",
    "build_runtime",
    "configure_run_optimizers",
    "extend_users_list",
    "in_todays_spelling",
    "merge_model_callbacks",
    "point_schedulers_at",
    "run_behaviour",
    "with_accumulation_scheduler",
]

if TYPE_CHECKING:
    from trainmesh.trainer.hooks import HookDispatcher
    from trainmesh.trainer.loop_state import LoopState
    from trainmesh.trainer.settings import LoopSettings


def configure_run_optimizers(
    state: LoopState, runtime: Runtime, hooks: HookDispatcher, *, fault_tolerant: bool, profiler: Any
) -> None:
    """The fit's optimizers and schedulers from the module's ``configure_optimizers``, placed by the
    runtime, in every fit as Lightning's (a second fit of the same model gets new ones)."""
    model = state.module
    with profiler.profile(f"[LightningModule]{type(model).__name__}.configure_optimizers"):
        returned = model.configure_optimizers()
    optimizers, state.lr_scheduler_configs = parse_optimizers(
        returned,
        type(model).__name__,
        # the loop steps no scheduler itself: any class (the module's lr_scheduler_step, or training_step)
        custom_scheduler_step=hooks.module_overrides("lr_scheduler_step") or is_manual(model),
        manual=is_manual(model),
        # "frequency" is 1.x's, read where training_step takes optimizer_idx (its turns); 2.x warns of it
        frequency_valid=_declares_optimizer_idx(type(model)),
    )
    if state.optimizer_loop is None:  # (a connected 1.x OptimizerLoop runs them its own way)
        # Lightning's point: before on_fit_start, the summary and hparams.yaml (several_optimizers.py)
        manual, takes_index = is_manual(model), _declares_optimizer_idx(type(model))
        refuse_several_automatic(model, len(optimizers), manual=manual, takes_index=takes_index)
    state.optimizer_frequencies = optimizer_frequencies(returned, type(model).__name__)
    state.optimizers = runtime.setup_optimizers(*optimizers)
    point_schedulers_at(state.lr_scheduler_configs, optimizers, state.optimizers)
    share_loop_state(runtime, state, fault_tolerant=fault_tolerant)  # to groups recovering from a peer


def _declares_optimizer_idx(module_class: Any) -> bool:
    try:
        return "optimizer_idx" in inspect.signature(module_class.training_step).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def point_schedulers_at(configs: list[SchedulerConfig], given: list[Any], prepared: list[Any]) -> None:
    """A strategy may replace an optimizer (zero1 shards its state): schedulers follow it."""
    for old, new in zip(given, prepared):
        inner = getattr(new, "optimizer", new)
        # A wrapper that steps the same optimizer (fault tolerance's commit) keeps its schedulers on it.
        if inner is not old and getattr(inner, "optimizer", None) is not old:
            for config in configs:
                if getattr(config.scheduler, "optimizer", None) is old:
                    config.scheduler.optimizer = inner


def build_runtime(
    *,
    accelerator: str,
    devices: int | str | list[int],
    strategy: str | Any,
    precision: str | int | None,
    compile: bool | dict[str, Any],
    num_nodes: int,
    max_restarts: int,
    enable_model_summary: bool,
    gpus: int | list[int] | None,
    distributed_backend: str | None,
    weights_summary: str | None,
    num_tpu_cores: int | None,
    watchdog_timeout: float | str | None,
    fault_tolerance: Any = None,
    plugins: Any = None,
    sync_batchnorm: bool = False,
    lightning1: dict[str, Any] | None = None,
) -> tuple[Runtime, bool, Any]:
    """The Runtime the arguments describe (its watchdog's timeout checked and set), enable_model_summary
    (the seeds' weights_summary sets it too) and the layer sync fit applies (sync_batchnorm)."""
    strategy = strategy_argument(strategy)  # 1.x's default None (lightning1/trainer_arguments.py)
    given = precision is not None  # None: Lightning's default, "32-true"; one given beside a precision plugin raises
    precision = unified_precision(precision)  # checked before the plugins, as Lightning's (precision_flag.py)
    plugged = sort_plugins(
        plugins, precision=precision, precision_given=given, strategy=strategy, sync_batchnorm=sync_batchnorm
    )
    # Lightning 1.x's removed arguments (lightning1/trainer_arguments.py)
    gpus, accelerator, devices = hardware_arguments(
        lightning1 or {}, gpus=gpus, accelerator=accelerator, devices=devices
    )
    # The seeds' Lightning 1.x spellings (gpus=2, accelerator="dp", ...) become today's.
    settings = legacy_arguments.translate(
        accelerator=accelerator,
        devices=devices,
        strategy=plugged.strategy,
        enable_model_summary=enable_model_summary,
        gpus=gpus,
        distributed_backend=distributed_backend,
        weights_summary=weights_summary,
        num_tpu_cores=num_tpu_cores,
    )
    # "16-mixed" on the CPU is "bf16-mixed", a plugin runs as given (precision_flag.py)
    chosen = choose_precision(
        str(plugged.precision),
        plugged.precision_plugin,
        device_type=resolve_accelerator(settings.accelerator),
        strategy=settings.strategy,
    )
    runtime = Runtime(
        accelerator=settings.accelerator,
        devices=settings.devices,
        strategy=settings.strategy,
        precision=chosen,
        num_nodes=num_nodes,
        max_restarts=max_restarts,
        compile=compile,
        fault_tolerance=fault_tolerance,
    )
    # Fabric's ModelParallelStrategy(parallelize_fn): Lightning's Trainer-side class refuses it
    runtime.trainer_port.refuse_strategy_for_trainer()
    runtime.supervision.set_watchdog_timeout(watchdog_timeout)  # supervision/watchdog.py
    # AsyncCheckpointIO: saves in the background (checkpoint/saves.py)
    runtime.checkpoints.saves.use_plugins(plugged.background_writer)
    if plugged.checkpoint_io is not None:  # trainer.strategy.checkpoint_io is the program's
        runtime.trainer_port.use_checkpoint_io(plugged.checkpoint_io)
    if plugged.layer_sync is not None:
        refuse_sync_on_cpu(runtime)
    return runtime, settings.enable_model_summary, plugged.layer_sync


_BEHAVIOUR = frozenset(inspect.signature(check_run_behaviour).parameters)


def run_behaviour(arguments: dict[str, Any]) -> RunBehaviour:
    """``benchmark``, ``detect_anomaly``, ... among the constructor's ``arguments``, checked as Lightning checks
    them (lightning2_arguments.py); 1.x's ``replace_sampler_ddp=False`` is ``use_distributed_sampler=False``."""
    given = {name: value for name, value in arguments.items() if name in _BEHAVIOUR}
    given["use_distributed_sampler"] = distributed_sampler(
        arguments["replace_sampler_ddp"], arguments["use_distributed_sampler"]
    )
    return check_run_behaviour(**given)


def refuse_sync_on_cpu(runtime: Runtime) -> None:
    """torch's SyncBatchNorm raises for CPU tensors: several CPU processes cannot sync batch norms.
    One process has nothing to sync (Lightning's single-device strategy applies no layer sync)."""
    processes = len(runtime.device_indices) * runtime.num_nodes
    if runtime.device_type == "cpu" and processes > 1:
        raise ValueError(
            f"sync_batchnorm=True on CPU with {processes} processes: torch.nn.SyncBatchNorm runs on GPUs only (its "
            "forward raises for a CPU tensor), so batch-norm statistics cannot be synced across CPU processes. "
            "Use accelerator='cuda', or drop sync_batchnorm (each process then normalizes with its own batch's "
            "statistics), or use GroupNorm/LayerNorm, which need no sync"
        )


# the Trainer's 1.x arguments it hands to build_runtime; its 1.x members, resume_from_checkpoint and the
# train loaders' mode at fit's start (lightning1/trainer_members.py)
__all__ = ["LIGHTNING1_ARGUMENTS", "LightningOneMembers", "lightning_one_fit", "lightning_one_run"]


def build_loggers(logger: Any, root: str, *, fast_dev_run: bool = False) -> list[Any]:
    """``logger=True`` (the default) is Lightning's default: TensorBoard when it is installed,
    else CSV, under ``<root>/lightning_logs/version_N`` (loggers/default.py). Under ``fast_dev_run``
    the loggers given are one ``DummyLogger``, as Lightning's: nothing is written, and a program's
    ``self.logger.experiment.add_histogram(...)`` still runs."""
    if logger is False or logger is None:
        return []
    if fast_dev_run:
        from trainmesh.loggers.logger import DummyLogger

        return [DummyLogger()] if logger is True or build_loggers(logger, root) else []
    if logger is True:
        from trainmesh.loggers.default import default_logger

        return [default_logger(root)]
    if isinstance(logger, Iterable) and not isinstance(logger, (str, bytes)):
        return list(logger)
    return [logger]


def build_callbacks(
    callbacks: Any, settings: LoopSettings, *, progress_bar: bool, summary: bool, enable_checkpointing: bool = True
) -> list[Any]:
    """The user's ``callbacks`` and the defaults the Trainer's arguments ask for (``settings``:
    the checked ones; ``enable_checkpointing`` there is False under ``fast_dev_run``, the
    argument of that name is the Trainer's own)."""
    checkpointing, fast_dev_run = settings.enable_checkpointing, bool(settings.fast_dev_run)
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    given = [] if callbacks is None else ([callbacks] if is_callback(callbacks) else list(callbacks))
    for item in given:
        if not is_callback(item):
            raise TypeError(
                f"callbacks: {type(item).__name__} is not a callback: it is not a trainmesh Callback and has none of "
                f"the callback hook methods (on_train_start, on_validation_end, ...). Pass Callback objects, or "
                f"objects with Lightning's callback methods"
            )
    # Lightning's order (its _CallbackConnector.on_trainer_init): the given ones, the default checkpoint,
    # (the max_time Timer, with_max_time), the default bar, the default summary; then finders first
    # and checkpoints last (_reorder_callbacks).
    result = list(given)
    wanted = checkpointing or (fast_dev_run and enable_checkpointing)
    if wanted and not any(isinstance(cb, Checkpoint) for cb in result):
        # Lightning's default, ModelCheckpoint(): the newest checkpoint only, no last.ckpt (a program lists
        # the folder, and its fit(ckpt_path="last") warns and starts afresh). trainmesh's automatic resume
        # after a restart or preemption takes the newest complete checkpoint of any name (checkpoint/paths.py).
        # Kept under fast_dev_run, saving nothing there, as Lightning's: programs read
        # trainer.checkpoint_callback.best_model_path ("") after such a fit.
        result.append(ModelCheckpoint())
    if not checkpointing and not fast_dev_run and any(isinstance(cb, Checkpoint) for cb in result):
        found = type(next(cb for cb in result if isinstance(cb, Checkpoint))).__name__
        raise MisconfigurationException(  # Lightning's exception and words
            f"Trainer was configured with `enable_checkpointing=False` but found `{found}` in callbacks list: "
            "drop the callback, or leave enable_checkpointing at True"
        )
    result += default_bar_and_summary(result, progress_bar=progress_bar, summary=summary)
    refuse_shared_state_keys(result)
    return reordered(result)


def extend_users_list(given: Any, built: list[Any]) -> None:
    """Lightning's ``Trainer(callbacks=[...])`` adds its callbacks to the list given, the program's own
    object (its ``_CallbackConnector.on_trainer_init``: ``trainer.callbacks = callbacks or []``, then
    ``.append``): after ``Trainer(...)`` that list holds the default ``ModelCheckpoint``, the
    ``max_time`` ``Timer``, the bar, the summary (1.x's ``GradientAccumulationScheduler`` of a dict
    ``accumulate_grad_batches``) too, in that order, and a second Trainer given the
    same list takes them as its own. An empty list, one callback, a tuple: not added to (Lightning's
    ``callbacks or []`` makes a new list of an empty one)."""
    if not isinstance(given, list) or not given:
        return
    from trainmesh.callbacks.timer import Timer

    known = {id(cb) for cb in given}

    def lightning_order(cb: Any) -> int:
        return [isinstance(cb, Checkpoint), isinstance(cb, Timer), _is_bar(cb), _is_summary(cb), True].index(True)

    given.extend(sorted((cb for cb in built if id(cb) not in known), key=lightning_order))


def merge_model_callbacks(callbacks: list[Any], model: Any) -> list[Any]:
    """The Trainer's callbacks with those ``model.configure_callbacks()`` returns, by Lightning's
    rule (its ``_attach_model_callbacks``): a model callback replaces every Trainer callback of a
    class it is (a subclass of), and checkpoint callbacks go last, each group in its order.

    >>> from trainmesh.callbacks import EarlyStopping
    >>> class M:
    ...     def configure_callbacks(self):
    ...         return EarlyStopping(monitor="val_loss", patience=9)
    >>> [type(cb).__name__ for cb in merge_model_callbacks([EarlyStopping(monitor="x"), Callback()], M())]
    ['Callback', 'EarlyStopping']
    """
    configure = getattr(model, "configure_callbacks", None)
    returned = configure() if callable(configure) else None
    if not returned:
        return callbacks
    given = list(returned) if isinstance(returned, Sequence) else [returned]
    for item in given:
        if not is_callback(item):
            raise TypeError(
                f"{type(model).__name__}.configure_callbacks returned a {type(item).__name__}, which has none of "
                "the callback hook methods; return Callback objects (one, or a list)"
            )
    # Lightning stops at the first Trainer class a model callback is a subclass of, in a set's
    # order; every such class is replaced here, the same where (as usual) there is only one.
    replaced = {
        type(cb) for cb in callbacks if type(cb) is not Callback and any(isinstance(m, type(cb)) for m in given)
    }
    if replaced:
        names = ", ".join(sorted(t.__name__ for t in replaced))
        rank_zero_info(  # Lightning's words
            "The following callbacks returned in `LightningModule.configure_callbacks` will override"
            f" existing callbacks passed to Trainer: {names}"
        )
    return reordered([cb for cb in callbacks if type(cb) not in replaced] + given)


def reordered(callbacks: list[Any]) -> list[Any]:
    """Lightning's ``_reorder_callbacks``: the finders first, the checkpoint callbacks last, each
    group in its order (callbacks that decide from metrics see everything others logged)."""
    finders = [cb for cb in callbacks if is_finder(cb)]
    checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint) and not is_finder(cb)]
    return finders + [cb for cb in callbacks if not (is_finder(cb) or isinstance(cb, Checkpoint))] + checkpoints


def default_bar_and_summary(given: list[Any], *, progress_bar: bool, summary: bool) -> list[Any]:
    """The bar and the summary the Trainer adds, as Lightning's: ``RichProgressBar`` and
    ``RichModelSummary`` where rich is installed, else ``TQDMProgressBar`` and ``ModelSummary``
    (trainmesh's bar and summary under those names); none where one is given. Two bars given, or a
    bar given with ``enable_progress_bar=False``, are refused, as Lightning refuses them."""
    import importlib.util

    from trainmesh.callbacks.model_summary import ModelSummary, RichModelSummary
    from trainmesh.callbacks.progress import RichProgressBar, TQDMProgressBar

    rich = importlib.util.find_spec("rich") is not None
    added: list[Any] = []
    bars = [cb for cb in given if _is_bar(cb)]
    if len(bars) > 1:  # Lightning's check, before the next one
        raise MisconfigurationException(
            "You added multiple progress bar callbacks to the Trainer, but currently only one progress bar is"
            f" supported: {[type(bar).__name__ for bar in bars]}; keep one"
        )
    if bars and not progress_bar:
        raise MisconfigurationException(
            f"Trainer was configured with `enable_progress_bar=False` but found `{type(bars[0]).__name__}` in "
            "callbacks list: drop the bar, or leave enable_progress_bar at True"
        )
    if progress_bar and not bars:
        added.append(RichProgressBar() if rich else TQDMProgressBar())
    given_summaries = [type(cb) for cb in given if _is_summary(cb)]
    if summary and not given_summaries:
        added.append(RichModelSummary() if rich else ModelSummary())
    elif summary:  # Lightning's line (its _CallbackConnector._configure_model_summary_callback)
        rank_zero_info(
            f"Trainer already configured with model summary callbacks: {given_summaries}."
            " Skipping setting a default `ModelSummary` callback."
        )
    return added


def is_finder(callback: Any) -> bool:
    """A LearningRateFinder / BatchSizeFinder (a subclass too): Lightning runs them first."""
    return any(klass.__name__ in ("LearningRateFinder", "BatchSizeFinder") for klass in type(callback).__mro__)


def _is_bar(callback: Any) -> bool:
    """A progress bar stands instead of the default one, a subclass of one too (Lightning's rule:
    any ``ProgressBar``): the base, trainmesh's drawing bar under Lightning's names, found by class name."""
    bars = ("ProgressBar", "TQDMProgressBar", "RichProgressBar")
    return any(klass.__name__ in bars for klass in type(callback).__mro__)


def _is_summary(callback: Any) -> bool:
    """A model summary (``ModelSummary``, ``RichModelSummary``, a subclass; Lightning's own classes given count
    too: found by class name)."""
    return any(klass.__name__ in ("ModelSummary", "RichModelSummary") for klass in type(callback).__mro__)


def log_device_info(runtime: Runtime) -> None:
    """Lightning's ``_log_device_info``, as ``Trainer()`` ends: the accelerators there are and what the run
    uses, logged in its words, and its warning where a GPU is there and not used."""
    import importlib.util

    import torch

    from trainmesh.utilities.rank_zero import rank_zero_warn
    from trainmesh.utilities.warnings import PossibleUserWarning

    mps = getattr(torch.backends, "mps", None)
    gpu = "cuda" if torch.cuda.is_available() else "mps" if mps is not None and mps.is_available() else None
    gpu_used = runtime.device_type in ("cuda", "mps")
    rank_zero_info(f"GPU available: {gpu is not None}{f' ({gpu})' if gpu else ''}, used: {gpu_used}")
    # trainmesh runs no TPU (its accelerator is refused): torch_xla's presence is what "available" can say
    rank_zero_info(f"TPU available: {importlib.util.find_spec('torch_xla') is not None}, using: 0 TPU cores")
    if gpu is not None and not gpu_used:
        rank_zero_warn(
            "GPU available but not used. You can set it by doing `Trainer(accelerator='gpu')`.",
            category=PossibleUserWarning,
        )


def exact_resume_argument(exact_resume: Any) -> bool:
    """``Trainer(exact_resume=...)``, trainmesh's own: ``fit(ckpt_path=...)`` then continues the saved
    epoch exactly (its generators, the rest of its batches) instead of Lightning's fresh read."""
    if not isinstance(exact_resume, bool):
        raise TypeError(
            f"Trainer(exact_resume={exact_resume!r}) takes True or False: True resumes fit(ckpt_path=...) exactly "
            "(as the uninterrupted run), False as Lightning does"
        )
    return exact_resume
