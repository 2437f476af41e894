"""The Trainer's full training state as a checkpoint dict, and its exact restoration."""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.checkpoint.cleanup import clean_stale_temporaries
from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.checkpoint.distributed import STATE_FILE, is_distributed_checkpoint, readable_metadata
from trainmesh.checkpoint.formats import UnreadableCheckpoint, content_problem, file_problem
from trainmesh.checkpoint.io import TEMPORARY_NAME
from trainmesh.seed import capture_rng_state
from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.trainer.results import StageResults
from trainmesh.utilities.dtensors import is_dtensor
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.trainer_view import TrainerView

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_state import LoopState

CHECKPOINT_FORMAT = 1
# The entries holding the model's and the optimizers' state: a strategy that shards writes
# them shard by shard (a distributed checkpoint), and reads them back in this run's layout.
TENSOR_ENTRIES = CheckpointKeys(model="state_dict", optimizers="optimizer_states")


def build_checkpoint(state: LoopState, runtime: Runtime, trainer: TrainerView, *,
                     weights_only: bool = False) -> dict[str, Any]:
    """``state``'s checkpoint; ``trainer`` is what the callbacks' ``on_save_checkpoint`` receive."""
    from trainmesh import __version__

    if weights_only:
        return _weights_only_checkpoint(state, runtime, __version__)
    module, loop = state.module, state.loop
    # Sharded where the strategy shards: a distributed checkpoint stores each rank's shards.
    pieces = runtime.state_dicts(state.model, state.optimizers, sharded=True)
    # max_steps ended the fit inside an epoch: record that moment, not the end-of-epoch
    # reporting that ran after it, so a resume trains the rest of the epoch (see fit_loop._end_epoch).
    stop = loop.stopped_inside
    checkpoint: dict[str, Any] = {
        "trainmesh_version": __version__,
        "format": CHECKPOINT_FORMAT,
        "epoch": state.current_epoch if stop is None else stop.epoch,
        "global_step": state.global_step,
        "loop": {
            "batches_done": loop.batches_done if stop is None else stop.batches_done,
            "epoch_finished": loop.epoch_finished and stop is None,
            "epoch_start_rng": loop.epoch_start_rng,
        },
        "state_dict": pieces["model"],
        "optimizer_states": pieces["optim"],
        "lr_schedulers": [config.scheduler.state_dict() for config in state.lr_scheduler_configs],
        "precision": runtime.precision.state_dict(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "hyper_parameters": dict(getattr(module, "hparams", {})),
        # Epoch accumulators summed over ranks: resumed, rank 0 carries them and the others start at 0.
        "train_results": _reduced_results(state, runtime),
        "epoch_metrics": dict(state.epoch_metrics),
        # What differs between processes, one entry per rank (a collective: every rank saves).
        "per_rank": runtime.all_gather_object({
            "rng": capture_rng_state() if stop is None else stop.rng,
            "pending_gradients": _pending_gradients(state, trainer.accumulate_grad_batches),
            "epoch_outputs": apply_to_tensors(loop.epoch_outputs if stop is None else stop.epoch_outputs, lambda t: t.cpu()),
        }),
    }
    checkpoint["rng"] = checkpoint["per_rank"][0]["rng"]
    datamodule = state.datamodule
    if datamodule is not None and hasattr(datamodule, "state_dict"):
        checkpoint["datamodule"] = datamodule.state_dict()
    if getattr(datamodule, "hparams", None):
        checkpoint["datamodule_hyper_parameters"] = dict(datamodule.hparams)
    if hasattr(module, "on_save_checkpoint"):
        module.on_save_checkpoint(checkpoint)
    for callback in trainer.callbacks:
        callback.on_save_checkpoint(trainer, module, checkpoint)
    return checkpoint


def _weights_only_checkpoint(state: LoopState, runtime: Runtime, version: str) -> dict[str, Any]:
    """The weights and what loading them needs (hyperparameters), as ModelCheckpoint(save_weights_only=True)
    writes: no optimizer, scheduler, callback or loop state, so ``fit`` refuses to resume from it."""
    module = state.module
    checkpoint: dict[str, Any] = {
        "trainmesh_version": version,
        "format": CHECKPOINT_FORMAT,
        "weights_only": True,
        # Where the weights were taken, for people reading the file; not a resumable position.
        "epoch": state.current_epoch,
        "global_step": state.global_step,
        # Sharded where the strategy shards; the empty optimizer list keeps the layout of a full checkpoint.
        "state_dict": runtime.state_dicts(state.model, [], sharded=True)["model"],
        "optimizer_states": [],
        "hyper_parameters": dict(getattr(module, "hparams", {})),
    }
    if hasattr(module, "on_save_checkpoint"):
        module.on_save_checkpoint(checkpoint)
    return checkpoint


def _pending_gradients(state: LoopState, accumulate: int) -> list[torch.Tensor | None] | None:
    """Gradients accumulated over micro-batches that no optimizer step has used yet."""
    if accumulate == 1 or state.loop.batches_done % accumulate == 0:
        return None
    params = list(state.module.parameters())
    if any(is_dtensor(p) for p in params):
        return None  # sharded gradients: a resume restarts the accumulation window (see notes)
    return [None if p.grad is None else p.grad.detach().cpu().clone() for p in params]


def _reduced_results(loop_state: LoopState, runtime: Runtime) -> dict[str, Any]:
    stop = loop_state.loop.stopped_inside
    if stop is not None:
        state = {name: dict(entry) for name, entry in stop.train_results.items()}  # reduced anew each save
    elif loop_state.train_results is None:
        return {}
    else:
        state = loop_state.train_results.state_dict()
    reduce = runtime.all_reduce
    for name in sorted(state):  # the same order on every rank: these are collectives
        entry = state[name]
        reduce_fx = StageResults.saved_reduce_fx(entry)
        op = reduce_fx if reduce_fx in ("max", "min") else "sum"
        if entry["total"] is not None:
            entry["total"] = reduce(entry["total"], op).cpu()
        weight = torch.tensor(float(entry["weight"]), dtype=torch.float64, device=runtime.device)
        entry["weight"] = float(reduce(weight, "sum"))
    return state


def restore_checkpoint(state: LoopState, runtime: Runtime, trainer: TrainerView, checkpoint: dict[str, Any], *,
                       source: str, weights_only: bool) -> dict[str, Any] | None:
    """Load ``checkpoint`` into ``state``; returns the RNG state to resume with (fit only).
    ``trainer`` is what the callbacks' ``on_load_checkpoint`` receive.

    Everything that can refuse the checkpoint is checked before the model changes, so a failed
    load leaves the model as it was.
    """
    module, model = state.module, state.model
    problem = content_problem(checkpoint, source)
    if problem is not None:
        raise UnreadableCheckpoint(problem)
    # Sharded form: names and global shapes, with no gather (a full state dict may exist on rank 0 only).
    check_state_dict_fits(runtime.state_dicts(model, [], sharded=True)["model"], checkpoint["state_dict"],
                          source=source)
    if not weights_only:
        _check_resumable(len(state.optimizers), checkpoint, source)
    runtime._load_state_dicts(model, [], {"model": checkpoint["state_dict"]})
    if hasattr(module, "on_load_checkpoint"):
        module.on_load_checkpoint(checkpoint)
    if weights_only:
        return None
    runtime._load_state_dicts(model, state.optimizers, {"optim": checkpoint.get("optimizer_states", [])})
    for config, saved in zip(state.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])):
        config.scheduler.load_state_dict(saved)
    runtime.precision.load_state_dict(checkpoint.get("precision", {}))
    for callback in trainer.callbacks:
        saved = checkpoint.get("callbacks", {}).get(callback.state_key)
        if saved is not None:
            callback.load_state_dict(saved)
        callback.on_load_checkpoint(trainer, module, checkpoint)
    if state.datamodule is not None and "datamodule" in checkpoint and hasattr(state.datamodule, "load_state_dict"):
        state.datamodule.load_state_dict(checkpoint["datamodule"])
    state.current_epoch = checkpoint["epoch"]
    state.global_step = checkpoint["global_step"]
    loop_state = checkpoint["loop"]
    state.loop.batches_done = loop_state["batches_done"]
    state.loop.epoch_finished = loop_state["epoch_finished"]
    state.loop.epoch_start_rng = loop_state["epoch_start_rng"]
    state.epoch_metrics.update(checkpoint.get("epoch_metrics", {}))
    own = _own_entry(runtime, checkpoint)
    state.loop.epoch_outputs = list(own.get("epoch_outputs") or [])
    state.sink.results.load_state_dict(_results_for_this_rank(checkpoint.get("train_results", {}), runtime.global_rank))
    for param, grad in zip(module.parameters(), own.get("pending_gradients") or []):
        param.grad = None if grad is None else grad.to(param.device)
    return own.get("rng", checkpoint["rng"])


def _check_resumable(optimizer_count: int, checkpoint: dict[str, Any], source: str) -> None:
    if checkpoint.get("weights_only"):
        raise ValueError(
            f"{source} holds only the model's weights (written with ModelCheckpoint(save_weights_only=True) or "
            "save_checkpoint(weights_only=True)): no optimizer, scheduler or loop state, so fit cannot resume "
            "from it. Load it for validate/test/predict(ckpt_path=...), or load its weights into the module and "
            "fit without ckpt_path; to resume later, save full checkpoints (save_weights_only=False)"
        )
    missing = [key for key in ("epoch", "global_step", "loop") if key not in checkpoint]
    if missing:
        raise ValueError(f"{source} holds weights but not where training stopped (no {missing}), so fit cannot "
                         "resume from it: load only its weights (validate/test with ckpt_path=, or "
                         "Module.load_from_checkpoint) and fit without ckpt_path")
    saved_optimizers = checkpoint.get("optimizer_states", [])
    if len(saved_optimizers) != optimizer_count:
        raise ValueError(
            f"the checkpoint holds {len(saved_optimizers)} optimizer state(s) but configure_optimizers() "
            f"made {optimizer_count}; resume with the same optimizer setup"
        )


def _own_entry(runtime: Runtime, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """This rank's saved RNG, pending gradients and outputs; rank 0's RNG on another layout."""
    per_rank = checkpoint.get("per_rank", [])
    if len(per_rank) == runtime.world_size:
        return per_rank[runtime.global_rank]
    if per_rank and (per_rank[0].get("pending_gradients") or per_rank[0].get("epoch_outputs")):
        rank_zero_warn(
            f"the checkpoint was written by {len(per_rank)} process(es) and is resumed on {runtime.world_size}: "
            "gradients of an unfinished accumulation window and kept training_epoch_end outputs are dropped"
        )
    return {"rng": checkpoint["rng"]}


def _results_for_this_rank(state: dict[str, Any], rank: int) -> dict[str, Any]:
    if rank == 0:
        return state
    neutral = {}
    for name, entry in state.items():
        op = StageResults.saved_reduce_fx(entry)
        fill = float("-inf") if op == "max" else float("inf") if op == "min" else 0.0
        total = None if entry["total"] is None else torch.full_like(entry["total"], fill)
        neutral[name] = {**entry, "total": total, "weight": 0.0}
    return neutral


def resolve_ckpt_path(trainer: TrainerView, ckpt_path: str | os.PathLike[str], *,
                      allow_fresh_start: bool = False) -> str | None:
    """Turn "last" / "best" into a file, and check that a given path exists.

    "last" is the newest ``last*.ckpt``; one that is torn or incomplete is skipped, with a warning
    naming it, for the newest complete checkpoint (another last one, or one beside a last one:
    the run's top-k). With ``allow_fresh_start`` (fit), "last" with no checkpoint anywhere returns
    None after a one-line notice: a script that a scheduler restarts passes ``ckpt_path="last"``
    from its very first run on (with only damaged ones, a warning names them too). A named file
    that is missing, "best" with none known, and "last" for validate/test/predict (which need
    trained weights) stay errors.
    """
    path = str(ckpt_path)
    if path == "last":
        return _resolve_last(trainer, allow_fresh_start=allow_fresh_start)
    if path == "best":
        callback = trainer.checkpoint_callback
        path = getattr(callback, "best_model_path", "") if callback is not None else ""
        if not path:
            raise ValueError(
                "ckpt_path='best': no best checkpoint is known for this trainer. Pass the file's "
                "path, or enable ModelCheckpoint(save_last=True) in the earlier run"
            )
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"ckpt_path={path!r} does not exist (looked at {os.path.abspath(path)}); pass a checkpoint "
            "file written by trainmesh, 'last' or 'best'"
        )
    return path


def _resolve_last(trainer: TrainerView, *, allow_fresh_start: bool) -> str | None:
    callback = trainer.checkpoint_callback
    known = getattr(callback, "last_model_path", "") if callback is not None else ""
    scan = _scan_checkpoints(trainer)
    found = _last_candidates(scan)
    skipped: list[str] = []
    for candidate in dict.fromkeys([known, *found] if known and os.path.exists(known) else found):
        problem = checkpoint_problem(candidate)
        if problem is None:
            if skipped and trainer.is_global_zero:
                warnings.warn(f"ckpt_path='last': skipped what is not a complete checkpoint ({'; '.join(skipped)}); "
                              f"resuming from the newest complete one, {candidate}", UserWarning, stacklevel=4)
            return candidate
        skipped.append(problem)
    where = " or ".join(scan.searched)
    if not allow_fresh_start:
        found_none = f"no readable checkpoint ({'; '.join(skipped)})" if skipped else f"no checkpoint found under {where}"
        raise ValueError(
            f"ckpt_path='last': {found_none}, and {trainer.stage or 'this stage'} "
            "needs trained weights. Pass a checkpoint file's path, or fit first (ModelCheckpoint("
            "save_last=True), the default checkpointing, writes last.ckpt)"
        )
    if trainer.is_global_zero:
        if skipped:  # never silently: every checkpoint there is damaged, and this run starts over
            warnings.warn(f"ckpt_path='last': no complete checkpoint; skipped {'; '.join(skipped)}", UserWarning,
                          stacklevel=4)
        print(f"ckpt_path='last': no {'complete ' if skipped else ''}checkpoint found under {where}; "
              "starting from scratch", flush=True)
    return None


def checkpoint_problem(path: str) -> str | None:
    """Why ``path`` is not a readable checkpoint (one message), or None; reads indexes, not tensors."""
    if is_distributed_checkpoint(path):
        try:
            readable_metadata(Path(path))
        except UnreadableCheckpoint as exc:
            return str(exc)
        return None
    return file_problem(Path(path))


def clear_interrupted_saves(trainer: TrainerView, ckpt_path: str | os.PathLike[str] | None) -> None:
    """At the start of fit, before this run saves anything: global rank 0 deletes the temporaries
    that killed saves left (see ``trainmesh.checkpoint.cleanup``) where this run saves and where it
    resumes from; the other ranks wait, so that every rank then finds the same checkpoints.

    Only what nothing modified since this moment is deleted: another live run's save in progress
    keeps touching its files.
    """
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    if trainer.is_global_zero:
        started = time.time()
        folders = [cb.dirpath for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
        if ckpt_path is not None and str(ckpt_path) == "last":
            folders += _scan_checkpoints(trainer).folders
        elif ckpt_path is not None and str(ckpt_path) != "best":
            folders.append(os.path.dirname(os.path.abspath(ckpt_path)))
        removed = [path for folder in dict.fromkeys(folders)
                   for path in clean_stale_temporaries(folder, older_than=started)]
        if removed:
            print(f"trainmesh: removed {len(removed)} leftover(s) of interrupted checkpoint saves "
                  f"(e.g. {removed[0]})", flush=True)
    trainer.runtime.barrier()


@dataclasses.dataclass
class _Scan:
    searched: list[str]  # the folders searched, each with everything below it
    found: dict[str, float]  # every visible *.ckpt file or checkpoint directory -> when it was completed
    folders: list[str]  # the folders that hold a checkpoint or a trainmesh temporary


def _scan_checkpoints(trainer: TrainerView) -> _Scan:
    """Every checkpoint an earlier run of this set-up may have written, and where.

    A checkpoint is a file, or a directory (a distributed checkpoint: fsdp, sharded, hsdp,
    model-parallel). trainmesh's own temporaries (``.NAME.xxxx.tmp`` while saving, ``.NAME.xxxx.old``
    while replacing) are never checkpoints.
    """
    # An earlier run wrote under default_root_dir, or in its own version folder next to this
    # run's logger folder, or in the checkpoint callback's fixed dirpath: a last.ckpt missed
    # there would make fit start from scratch instead of resuming.
    folders = [trainer.default_root_dir]
    if trainer.loggers:
        folders.append(os.path.dirname(trainer.log_dir))
    callback = trainer.checkpoint_callback
    if callback is not None and callback.dirpath:
        folders.append(callback.dirpath)
    folders = list(dict.fromkeys(os.path.abspath(folder) for folder in folders))
    folders = [f for f in folders if not any(f.startswith(other + os.sep) for other in folders)]
    found: dict[str, float] = {}
    holding: dict[str, None] = {}  # ordered set
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in files:
                if name.endswith(".ckpt") and not name.startswith("."):
                    found[os.path.join(root, name)] = os.path.getmtime(os.path.join(root, name))
                if name.endswith(".ckpt") or TEMPORARY_NAME.match(name):
                    holding[root] = None
            descend = []
            for name in dirs:
                path = os.path.join(root, name)
                if TEMPORARY_NAME.match(name):  # a staging or retired checkpoint directory
                    holding[root] = None
                elif name.endswith(".ckpt") and is_distributed_checkpoint(path):
                    holding[root] = None
                    found[path] = _completed_at(path)
                else:  # a checkpoint's insides hold no further checkpoints
                    descend.append(name)
            dirs[:] = descend
    return _Scan(searched=folders, found=found, folders=list(holding))


def _last_candidates(scan: _Scan) -> list[str]:
    """The newest ``last*.ckpt`` first; after it, should it be unreadable, the other checkpoints
    beside a last one, newest first (a run's top-k checkpoints live beside its last.ckpt)."""
    lasts = [path for path in scan.found if _is_last_name(os.path.basename(path))]
    if not lasts:
        return []
    newest = max(lasts, key=scan.found.__getitem__)
    beside = {os.path.dirname(path) for path in lasts}
    rest = [path for path in scan.found if path != newest and (path in lasts or os.path.dirname(path) in beside)]
    return [newest, *sorted(rest, key=scan.found.__getitem__, reverse=True)]


def _is_last_name(name: str) -> bool:
    return name.startswith("last") and name.endswith(".ckpt")


def _completed_at(path: str) -> float:
    """When the distributed checkpoint at ``path`` was completed (an incomplete one: when last
    touched, so that "last" names it when it skips it)."""
    # The state file is written last, inside the staging directory, just before the rename: its
    # time is the save's (a directory's own mtime need not change when it is renamed into place).
    times = [os.path.join(path, STATE_FILE), path]
    return max((os.path.getmtime(t) for t in times if os.path.exists(t)), default=0.0)
