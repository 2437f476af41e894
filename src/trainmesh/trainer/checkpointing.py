"""The Trainer's full training state as a checkpoint dict, and its exact restoration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainmesh.callbacks.base import callback_states, defines_hook, load_callback_state, state_key_of
from trainmesh.checkpoint import (
    CheckpointKeys,
    UnreadableCheckpoint,
    check_state_dict_fits,
    content_problem,
)
from trainmesh.checkpoint.lightning_keys import (
    lightning_loops,
    precision_entries,
    saved_precision_state,
    version_entry,
    written_by_lightning,
)
from trainmesh.hyperparameters import datamodule_state, saved_hyperparameters
from trainmesh.seed import capture_rng_state
from trainmesh.trainer.checkpoint_results import results_for_this_rank, saved_results
from trainmesh.trainer.finite_loss import verify_finite_losses
from trainmesh.trainer.hooks import warn_returned_callback_state
from trainmesh.trainer.lightning_resume import loop_entry_of, resumable_lightning_checkpoint
from trainmesh.trainer.loader_states import train_loader_states
from trainmesh.trainer.loop_progress import saved_step_counts
from trainmesh.trainer.run_identity import RUN_KEY, this_run
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_state import LoopState
    from trainmesh.trainer.settings import LoopSettings

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)

CHECKPOINT_FORMAT = 1
# The entries holding the model's and the optimizers' state: a strategy that shards writes
# them shard by shard (a distributed checkpoint), and reads them back in this run's layout.
TENSOR_ENTRIES = CheckpointKeys(model="state_dict", optimizers="optimizer_states")


def write_checkpoint(
    state: LoopState,
    runtime: Runtime,
    trainer: TrainerView,
    path: str,
    *,
    weights_only: bool,
) -> None:
    """Build ``state``'s checkpoint and write it to ``path`` (the Trainer's every save)."""
    verify_finite_losses(state.loop.loss_check, path)  # no checkpoint of weights a non-finite step produced
    checkpoint = build_checkpoint(state, runtime, trainer, weights_only=weights_only)
    # The strategy waits for every rank; one that shards writes each rank's shards (a folder each).
    runtime.checkpoints.write(checkpoint, path, sharded=TENSOR_ENTRIES)


def build_checkpoint(
    state: LoopState, runtime: Runtime, trainer: TrainerView, *, weights_only: bool = False
) -> dict[str, Any]:
    """``state``'s checkpoint; ``trainer`` is what the callbacks' ``on_save_checkpoint`` receive."""
    from trainmesh.version import __version__

    if weights_only:
        return _weights_only_checkpoint(state, runtime, __version__)
    module = state.module
    pieces = _stored_state_dicts(runtime, state.model, state.optimizers)
    # max_steps ended the fit inside an epoch: trainmesh's loop entry records that moment, not the
    # end-of-epoch reporting that ran after it, so a resume trains the rest of the epoch (see
    # epoch_end.end_epoch); Lightning's epoch and counters are the trainer's, as Lightning saves them.
    checkpoint_epoch, loop_entry = state.current_epoch, _loop_entry(state)
    # Lightning's keys in Lightning's order (dump_checkpoint), then trainmesh's own
    checkpoint: dict[str, Any] = {
        "epoch": checkpoint_epoch,
        "global_step": state.global_step,
        **version_entry(),
        "state_dict": pieces["model"],
        # Lightning's progress counters of this position, for Lightning's own fit(ckpt_path=)
        "loops": lightning_loops_of(state),
        "callbacks": callback_states(trainer.callbacks),
        "optimizer_states": pieces["optim"],
        "lr_schedulers": [config.scheduler.state_dict() for config in state.lr_scheduler_configs],
        **precision_entries(runtime.precision.state_dict()),
    }
    checkpoint.update(saved_hyperparameters(module))
    checkpoint.update(_datamodule_entries(state.datamodule))
    checkpoint |= {
        "trainmesh_version": __version__,
        "format": CHECKPOINT_FORMAT,
        RUN_KEY: this_run(module),  # which run wrote it: an automatic resume takes only its own (run_identity.py)
        "loop": loop_entry,
        # Epoch accumulators summed over ranks: resumed, rank 0 carries them and the others start at 0.
        "train_results": saved_results(state, runtime),
        "epoch_metrics": dict(state.epoch_metrics),
        # What differs between processes, one entry per rank (a collective: every rank saves).
        "per_rank": runtime.all_gather_object(_rank_entry(state, runtime, trainer.accumulate_grad_batches)),
    }
    checkpoint["rng"] = checkpoint["per_rank"][0]["rng"]
    # Lightning's order: the callbacks' on_save_checkpoint, then the module's
    _save_callbacks(trainer, module, checkpoint)
    if hasattr(module, "on_save_checkpoint"):
        module.on_save_checkpoint(checkpoint)
    return checkpoint


def _stored_state_dicts(runtime: Runtime, model: Any, optimizers: Any) -> dict[str, Any]:
    """The model's and optimizers' states as the checkpoint stores them: each rank's shards where the
    strategy shards (a distributed checkpoint), or whole tensors gathered on rank 0 where it writes one
    file though it shards (FSDP's ``state_dict_type="full"``: the other ranks' hooks see ``{}``, as in
    Lightning, whose FSDP gathers with ``rank0_only``)."""
    return runtime.checkpoints.state_dicts(model, optimizers, sharded=not runtime.capabilities.whole_checkpoints)


def _save_callbacks(trainer: TrainerView, module: Any, checkpoint: dict[str, Any]) -> None:
    """The callbacks' on_save_checkpoint, as Lightning 2.x calls it: a returned value is not stored (Lightning
    1.x until 1.6 stored it as the callback's state; pytorch-lightning 1.8 and 1.9 refuse it, 2.x ignores it),
    said once per callback (lightning1/legacy_hooks.py)."""
    for callback in trainer.callbacks:
        if defines_hook(callback, "on_save_checkpoint"):
            state = callback.on_save_checkpoint(trainer, module, checkpoint)
            if state is not None:
                warn_returned_callback_state(callback)


def _datamodule_entries(datamodule: Any) -> dict[str, Any]:
    """The data module's hyperparameters (Lightning's ``datamodule_hparams_name`` and
    ``datamodule_hyper_parameters``) and its ``state_dict`` under its class's name (Lightning's key, so
    checkpoints load both ways; an empty state is not saved)."""
    entries: dict[str, Any] = saved_hyperparameters(datamodule)
    if datamodule is not None and hasattr(datamodule, "state_dict") and (held := datamodule.state_dict()):
        entries[type(datamodule).__qualname__] = held
    return entries


def _weights_only_checkpoint(state: LoopState, runtime: Runtime, version: str) -> dict[str, Any]:
    """The weights and what loading them needs (hyperparameters), as ModelCheckpoint(save_weights_only=True)
    writes: no optimizer, scheduler, callback or trainmesh loop state (Lightning's ``loops`` counters, as Lightning
    writes them there), so ``fit`` refuses to resume from it."""
    module = state.module
    checkpoint: dict[str, Any] = {
        # Where the weights were taken, for people reading the file; not a resumable position.
        "epoch": state.current_epoch,
        "global_step": state.global_step,
        **version_entry(),
        # The empty optimizer list keeps the layout of a full checkpoint.
        "state_dict": _stored_state_dicts(runtime, state.model, [])["model"],
        # Lightning writes its loops' counters in a weights-only checkpoint too
        "loops": lightning_loops_of(state),
        # (no "optimizer_states" key at all, as Lightning 2.6 and 1.9.5 write none in a weights-only file)
        **saved_hyperparameters(module),
        # Lightning dumps the data module's hyperparameters and state in a weights-only checkpoint too, so
        # that LightningDataModule.load_from_checkpoint reads it
        **_datamodule_entries(state.datamodule),
        "trainmesh_version": version,
        "format": CHECKPOINT_FORMAT,
        RUN_KEY: this_run(module),
        "weights_only": True,
    }
    if hasattr(module, "on_save_checkpoint"):
        module.on_save_checkpoint(checkpoint)
    return checkpoint


def lightning_loops_of(state: LoopState) -> dict[str, Any]:
    """Lightning's ``loops`` entry for where ``state`` stands: its loops' ``state_dict()``s (``fit_loop``,
    ``validate_loop``, ``test_loop``, ``predict_loop``), what ``trainer.fit_loop.state_dict()`` reads."""
    automatic = getattr(state.module, "automatic_optimization", True)
    entry = _loop_entry(state)
    loops = lightning_loops(
        entry, state.current_epoch, state.global_step, automatic=automatic, counters=_loop_counters(state)
    )
    # the stateful train loaders' states, where Lightning's fit loop keeps them (loader_states.py)
    if states := train_loader_states(getattr(state.fit_data, "asked_train_loader", None)):
        loops["fit_loop"]["state_dict"]["combined_loader"] = states
    return loops


def _loop_counters(state: LoopState) -> dict[str, dict[str, Any]]:
    """The evaluation loops' counters (trainer/loop_progress.py) as Lightning's ``loops`` entry holds
    them: the fit's validation (its ``val_loop``), ``trainer.validate``'s, ``trainer.test``'s and
    ``trainer.predict``'s."""
    counters = state.progress
    loops = {
        "val_loop": counters.fit_validation,
        "validate_loop": counters.validate,
        "test_loop": counters.test,
        "predict_loop": counters.predict,
        "scheduler_progress": counters.schedulers,
    }
    written = {
        name: {
            "total": vars(progress.total).copy(),
            "current": vars(progress.current).copy(),
            "is_last_batch": progress.is_last_batch,
        }
        for name, progress in loops.items()
    }
    # The fit's training batches as its loop counts them (a save in on_train_batch_end: that batch not yet
    # completed; after the fit: the last epoch's), its optimizer steps and zero_grad calls
    written["train_batches"] = {
        "total": vars(counters.train_batches.total).copy(),
        "current": vars(counters.train_batches.current).copy(),
        "is_last_batch": state.is_last_batch,
    }
    written["optimizer"] = {
        "step": saved_step_counts(state.global_step, counters),
        "zero_grad": {
            "total": vars(counters.zero_grads.total).copy(),
            "current": vars(counters.zero_grads.current).copy(),
        },
        # Lightning counts a batch's step in _batches_that_stepped after its validation
        "batches_stepped": state.loop.batches_stepped,
    }
    return written


def _loop_entry(state: LoopState) -> dict[str, Any]:
    loop, stop = state.loop, state.loop.stopped_inside
    return {
        # max_steps ended the fit inside this epoch: a resume trains the rest of it (not the checkpoint's "epoch")
        **({} if stop is None else {"stopped_epoch": stop.epoch}),
        "batches_done": loop.batches_done if stop is None else stop.batches_done,
        # Taken in the epoch's on_train_epoch_end hooks (epoch_ending), it resumes with the next
        # epoch without the epoch's plateau step, as Lightning's restart does (its metric is not in
        # the checkpoint). Taken in the validation after its last batch, the epoch's end is still
        # due (Lightning's epoch_progress not yet processed): a resume runs its on_train_epoch_end
        # hooks, without the plateau step, before the next epoch.
        "epoch_finished": (loop.epoch_finished or loop.epoch_ending or loop.epoch_end_validation) and stop is None,
        "epoch_end_due": loop.epoch_end_validation and not (loop.epoch_finished or loop.epoch_ending) and stop is None,
        "epoch_start_rng": loop.epoch_start_rng,
        "total_batches": loop.total_batches,
        # taken in a validation after a batch (ModelCheckpoint's on_validation_end): that batch's step counts
        "batches_stepped": loop.batches_stepped + loop.stepped_pending,
    }


def _rank_entry(state: LoopState, runtime: Runtime, accumulate: int) -> dict[str, Any]:
    loop, stop = state.loop, state.loop.stopped_inside
    return {
        "rng": capture_rng_state() if stop is None else stop.rng,
        "pending_gradients": _pending_gradients(state, runtime, accumulate),
        "epoch_outputs": apply_to_tensors(
            loop.epoch_outputs if stop is None else stop.epoch_outputs, lambda t: t.cpu()
        ),
    }


def _pending_gradients(state: LoopState, runtime: Runtime, accumulate: int) -> list[torch.Tensor | None] | None:
    """Gradients accumulated over micro-batches that no optimizer step has used yet."""
    if accumulate == 1 or state.loop.batches_done % accumulate == 0:
        return None
    if runtime.capabilities.splits_parameters:  # pieces of gradients: a resume restarts the window (see notes)
        return None
    params = list(state.module.parameters())
    return [None if p.grad is None else p.grad.detach().cpu().clone() for p in params]


def restore_modules(
    state: LoopState,
    runtime: Runtime,
    trainer: TrainerView,
    checkpoint: dict[str, Any],
    *,
    source: str,
    weights_only: bool,
    early: bool = False,
) -> None:
    """What Lightning restores first (its ``_restore_modules_and_callbacks``): the module's and the
    data module's hooks and states, the weights, the callbacks. ``early``: before
    ``configure_optimizers``, as Lightning does where the strategy does not restore after setup.

    Everything that can refuse the checkpoint is checked before the weights change, so a failed
    load leaves them as they were (the module's ``on_load_checkpoint`` runs before, as in
    Lightning, where it may adapt the checkpoint).
    """
    module, model = state.module, state.model
    # Lightning's own checkpoint: its weights (and callback states) for validate/test/predict, as
    # Lightning loads them; fit does not resume from it (content_problem says why)
    # and a full one fit resumes from (lightning_resume.py)
    lightning = weights_only and written_by_lightning(checkpoint) or resumable_lightning_checkpoint(checkpoint)
    problem = None if lightning else content_problem(checkpoint, source)
    if problem is not None:
        raise UnreadableCheckpoint(problem)
    # Lightning's order: the module's hooks see the checkpoint before its weights are loaded (they may change it)
    if hasattr(module, "on_load_checkpoint"):
        module.on_load_checkpoint(checkpoint)
    # Each rank's shards: names and global shapes (a DTensor's shape is its whole tensor's), with no gather,
    # also where the checkpoint is one file of whole tensors (FSDP's "full"; a gather would give rank 0 alone them).
    # Lightning loads with the module's strict_loading (a module that saves part of its weights sets False)
    strict = getattr(module, "strict_loading", True) in (None, True)  # Lightning's getter: None (unset) is strict
    check_state_dict_fits(
        runtime.checkpoints.state_dicts(model, [], sharded=True)["model"],
        checkpoint["state_dict"],
        source=source,
        strict=strict,
    )
    if not weights_only:
        # Early (before configure_optimizers) the optimizers' count is checked with the training state.
        _check_resumable(None if early else len(state.optimizers), checkpoint, source)
    runtime.checkpoints.load_state_dicts(model, [], {"model": checkpoint["state_dict"]}, strict=strict)
    held = datamodule_state(state.datamodule, checkpoint)
    if held is not None and hasattr(state.datamodule, "load_state_dict"):
        state.datamodule.load_state_dict(held)
    # Lightning 2.6 gives the callbacks their saved states for validate/test/predict too; pytorch-lightning
    # 1.9.5 only in fit, so a 1.x module's test(ckpt_path="best") leaves ModelCheckpoint's best_k_models,
    # best and last paths as fit ended (2.6 turns them back to what the loaded file knew)
    if not (weights_only and trainer._written_for_lightning1):
        _restore_callbacks(trainer, module, checkpoint)


def _check_max_epochs(trainer: TrainerView, epoch: int, source: str) -> None:
    """Lightning's check: a checkpoint past ``max_epochs`` stops the resumed fit instead of ending it at once."""
    max_epochs = trainer.max_epochs
    if max_epochs is not None and max_epochs != -1 and epoch > max_epochs:
        raise MisconfigurationException(
            f"You restored a checkpoint with current_epoch={epoch}, but you have set Trainer(max_epochs={max_epochs})"
            f" ({source}); raise max_epochs above {epoch} to train on, or resume from an earlier checkpoint"
        )


def restore_checkpoint(
    state: LoopState,
    runtime: Runtime,
    trainer: TrainerView,
    checkpoint: dict[str, Any],
    *,
    source: str,
    weights_only: bool,
    modules_restored: bool = False,
) -> dict[str, Any] | None:
    """Load ``checkpoint`` into ``state``; returns the RNG state to resume with (fit only).
    ``trainer`` is what the callbacks' ``on_load_checkpoint`` receive.
    With ``weights_only`` the weights, the data module's and the callbacks' states (as Lightning
    restores for validate/test/predict), without the training state. ``modules_restored``: a fit
    whose :func:`restore_modules` ran before ``configure_optimizers`` (Lightning's order for a
    checkpoint that is not sharded); only the training state is left.
    """
    if not modules_restored:
        restore_modules(state, runtime, trainer, checkpoint, source=source, weights_only=weights_only)
    if weights_only:
        return None
    if modules_restored:
        _check_resumable(len(state.optimizers), checkpoint, source)
    model, module = state.model, state.module
    runtime.checkpoints.load_optimizer_states(model, state.optimizers, checkpoint)
    for config, saved in zip(state.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])):
        config.scheduler.load_state_dict(saved)
    runtime.precision.load_state_dict(saved_precision_state(checkpoint))
    # fit(ckpt_path=...) named by the program resumes as Lightning 2.6 from any file with its "loops"
    # entry (trainmesh's own too): the position, no generators, no pending gradients; trainmesh's
    # automatic resume and Trainer(exact_resume=True) continue exactly ("loop": the rest of the epoch)
    as_lightning = state.named_resume and "loops" in checkpoint
    loop_state = (
        checkpoint["loop"]
        if "loop" in checkpoint and not as_lightning
        else loop_entry_of(checkpoint, steps_bounded=trainer.max_steps != -1)
    )
    state.current_epoch = loop_state.get("stopped_epoch", checkpoint["epoch"])
    _check_max_epochs(trainer, state.current_epoch, source)
    state.global_step = checkpoint["global_step"]
    state.loop.batches_done = loop_state["batches_done"]
    state.loop.epoch_not_started = bool(loop_state.get("epoch_not_started", False))
    # Older checkpoints lack epoch_end_due: they resume after the epoch's end, as they did
    state.loop.epoch_end_due = bool(loop_state.get("epoch_end_due", False))
    state.loop.epoch_finished = loop_state["epoch_finished"] and not state.loop.epoch_end_due
    state.loop.epoch_start_rng = loop_state["epoch_start_rng"]
    state.loop.total_batches = loop_state.get("total_batches", 0)
    state.loop.batches_stepped = loop_state.get("batches_stepped", state.global_step)  # older checkpoints
    # callback_metrics start empty in a resumed fit, as in Lightning's (it saves none): the
    # checkpoint's epoch_metrics are for reading a checkpoint, not restored into the run.
    own = {} if as_lightning else _own_entry(runtime, checkpoint)
    state.loop.epoch_outputs = list(own.get("epoch_outputs") or [])
    # the epoch's running means: Lightning's resumed epoch starts them empty (it saves none)
    saved_results = {} if as_lightning else checkpoint.get("train_results", {})
    state.log_collector.results.load_state_dict(
        results_for_this_rank(saved_results, runtime.global_rank, runtime.world_size)
    )
    for param, grad in zip(module.parameters(), own.get("pending_gradients") or []):
        param.grad = None if grad is None else grad.to(param.device)
    rng: dict[str, Any] | None = None if as_lightning else own.get("rng", checkpoint.get("rng"))
    # Lightning's checkpoint holds none (nor does its resume restore any): the generators as they are
    return capture_rng_state() if rng is None else rng


def announce_nothing_left(state: LoopState, settings: LoopSettings, source: str, *, announces: bool) -> None:
    """After a resume: say so when the checkpoint already reached max_epochs or max_steps, for
    fit then trains nothing (a rerun of a finished job would otherwise end without a word)."""
    epoch = state.current_epoch + (1 if state.loop.epoch_finished else 0)  # the epoch a resume would start
    if settings.max_steps != -1 and state.global_step >= settings.max_steps:
        limit = f"max_steps={settings.max_steps}"
    elif settings.max_epochs != -1 and epoch >= settings.max_epochs:
        limit = f"max_epochs={settings.max_epochs}"
    else:
        return
    if announces:
        log.info(
            f"trainmesh: {source} is at epoch {state.current_epoch}, global step {state.global_step}: {limit} is "
            f"already reached, so there is nothing to train. Raise {limit.split('=')[0]} to train further"
        )


def _restore_callbacks(trainer: TrainerView, module: Any, checkpoint: dict[str, Any]) -> None:
    """Lightning's order: every callback's on_load_checkpoint (with the whole checkpoint), then every
    callback's saved state; nothing for a checkpoint without callback states (a weights-only one)."""
    states = checkpoint.get("callbacks")
    if states is None:
        return
    _warn_missing_callbacks(trainer, states)
    for callback in trainer.callbacks:
        if defines_hook(callback, "on_load_checkpoint"):
            callback.on_load_checkpoint(trainer, module, checkpoint)
    for callback in trainer.callbacks:
        load_callback_state(callback, states)


def _warn_missing_callbacks(trainer: TrainerView, states: dict[Any, Any]) -> None:
    """Lightning's warning for a checkpoint holding the state of a callback this Trainer lacks (its state
    would be dropped without a word)."""
    missing = states.keys() - {state_key_of(callback) for callback in trainer.callbacks}
    if missing:
        rank_zero_warn(
            "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided "
            f"during `Trainer` instantiation. Please add the following callbacks: {list(missing)}."
        )


def _check_resumable(optimizer_count: int | None, checkpoint: dict[str, Any], source: str) -> None:
    if checkpoint.get("weights_only"):
        raise ValueError(
            f"{source} holds only the model's weights (written with ModelCheckpoint(save_weights_only=True) or "
            "save_checkpoint(weights_only=True)): no optimizer, scheduler or loop state, so fit cannot resume "
            "from it. Load it for validate/test/predict(ckpt_path=...), or load its weights into the module and "
            "fit without ckpt_path; to resume later, save full checkpoints (save_weights_only=False)"
        )
    loop = "loops" if resumable_lightning_checkpoint(checkpoint) else "loop"
    missing = [key for key in ("epoch", "global_step", loop) if key not in checkpoint]
    if missing:
        raise ValueError(
            f"{source} holds weights but not where training stopped (no {missing}), so fit cannot "
            "resume from it: load only its weights (validate/test with ckpt_path=, or "
            "Module.load_from_checkpoint) and fit without ckpt_path"
        )
    saved_optimizers = checkpoint.get("optimizer_states", [])
    if optimizer_count is not None and len(saved_optimizers) != optimizer_count:
        raise ValueError(
            f"the checkpoint holds {len(saved_optimizers)} optimizer state(s) but configure_optimizers() "
            f"made {optimizer_count}; resume with the same optimizer setup"
        )


def _own_entry(runtime: Runtime, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """This rank's saved RNG, pending gradients and outputs; rank 0's RNG on another layout."""
    per_rank = checkpoint.get("per_rank", [])
    if len(per_rank) == runtime.world_size:
        own: dict[str, Any] = per_rank[runtime.global_rank]
        return own
    if per_rank and (per_rank[0].get("pending_gradients") or per_rank[0].get("epoch_outputs")):
        rank_zero_warn(
            f"the checkpoint was written by {len(per_rank)} process(es) and is resumed on {runtime.world_size}: "
            "gradients of an unfinished accumulation window and kept training_epoch_end outputs are dropped"
        )
    return {"rng": checkpoint.get("rng")}
