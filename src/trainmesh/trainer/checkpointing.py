"""The Trainer's full training state as a checkpoint dict, and its exact restoration."""

from __future__ import annotations

import os
from typing import Any

import torch

from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.seed import capture_rng_state

CHECKPOINT_FORMAT = 1


def build_checkpoint(trainer: Any) -> dict[str, Any]:
    from trainmesh import __version__

    strategy, module, loop = trainer.strategy, trainer.module, trainer.loop
    checkpoint: dict[str, Any] = {
        "trainmesh_version": __version__,
        "format": CHECKPOINT_FORMAT,
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "loop": {
            "batches_done": loop.batches_done,
            "epoch_finished": loop.epoch_finished,
            "epoch_start_rng": loop.epoch_start_rng,
        },
        # Sharded where the strategy shards: a distributed checkpoint stores each rank's shards.
        "state_dict": strategy.module_state_dict(module, sharded=True),
        "optimizer_states": [strategy.optimizer_state_dict(opt.optimizer, sharded=True) for opt in trainer.optimizers],
        "lr_schedulers": [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs],
        "precision": trainer.runtime.precision.state_dict(),
        "rng": capture_rng_state(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "hyper_parameters": dict(getattr(module, "hparams", {})),
        "train_results": trainer.train_results.state_dict() if trainer.train_results is not None else {},
        "epoch_metrics": dict(trainer.epoch_metrics),
    }
    if loop.epoch_outputs:
        checkpoint["epoch_outputs"] = loop.epoch_outputs  # training_epoch_end gets the whole epoch
    pending = _pending_gradients(trainer)
    if pending is not None:
        checkpoint["pending_gradients"] = pending
    if trainer.datamodule is not None and hasattr(trainer.datamodule, "state_dict"):
        checkpoint["datamodule"] = trainer.datamodule.state_dict()
    if hasattr(module, "on_save_checkpoint"):
        module.on_save_checkpoint(checkpoint)
    for callback in trainer.callbacks:
        callback.on_save_checkpoint(trainer, module, checkpoint)
    return checkpoint


def _pending_gradients(trainer: Any) -> list[torch.Tensor | None] | None:
    """Gradients accumulated over micro-batches that no optimizer step has used yet."""
    if trainer.accumulate_grad_batches == 1 or trainer.loop.batches_done % trainer.accumulate_grad_batches == 0:
        return None
    return [None if p.grad is None else p.grad.detach().clone() for p in trainer.module.parameters()]


def restore_checkpoint(trainer: Any, checkpoint: dict[str, Any], *, source: str, weights_only: bool) -> dict[str, Any] | None:
    """Load ``checkpoint`` into the trainer; returns the RNG state to resume with (fit only)."""
    strategy, module = trainer.strategy, trainer.module
    if "state_dict" not in checkpoint:
        raise ValueError(f"this file is not a trainmesh checkpoint (no 'state_dict'; keys: {sorted(checkpoint)})")
    # Sharded form: names and global shapes, with no gather (a full state dict may exist on rank 0 only).
    check_state_dict_fits(strategy.module_state_dict(module, sharded=True), checkpoint["state_dict"], source=source)
    strategy.load_module_state_dict(module, checkpoint["state_dict"])
    if hasattr(module, "on_load_checkpoint"):
        module.on_load_checkpoint(checkpoint)
    if weights_only:
        return None
    saved_optimizers = checkpoint.get("optimizer_states", [])
    if len(saved_optimizers) != len(trainer.optimizers):
        raise ValueError(
            f"the checkpoint holds {len(saved_optimizers)} optimizer state(s) but configure_optimizers() "
            f"made {len(trainer.optimizers)}; resume with the same optimizer setup"
        )
    for optimizer, state in zip(trainer.optimizers, saved_optimizers):
        strategy.load_optimizer_state_dict(optimizer.optimizer, state)
    for config, state in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])):
        config.scheduler.load_state_dict(state)
    trainer.runtime.precision.load_state_dict(checkpoint.get("precision", {}))
    for callback in trainer.callbacks:
        state = checkpoint.get("callbacks", {}).get(callback.state_key)
        if state is not None:
            callback.load_state_dict(state)
        callback.on_load_checkpoint(trainer, module, checkpoint)
    if trainer.datamodule is not None and "datamodule" in checkpoint and hasattr(trainer.datamodule, "load_state_dict"):
        trainer.datamodule.load_state_dict(checkpoint["datamodule"])
    trainer.current_epoch = checkpoint["epoch"]
    trainer.global_step = checkpoint["global_step"]
    loop_state = checkpoint["loop"]
    trainer.loop.batches_done = loop_state["batches_done"]
    trainer.loop.epoch_finished = loop_state["epoch_finished"]
    trainer.loop.epoch_start_rng = loop_state["epoch_start_rng"]
    trainer.epoch_metrics.update(checkpoint.get("epoch_metrics", {}))
    trainer.loop.epoch_outputs = list(checkpoint.get("epoch_outputs", []))
    trainer.sink.results.load_state_dict(checkpoint.get("train_results", {}))
    for param, grad in zip(module.parameters(), checkpoint.get("pending_gradients", [])):
        param.grad = None if grad is None else grad.to(param.device)
    return checkpoint["rng"]


def resolve_ckpt_path(trainer: Any, ckpt_path: str | os.PathLike[str]) -> str:
    """Turn "last" / "best" into a file, and check that a given path exists."""
    path = str(ckpt_path)
    if path in ("last", "best"):
        callback = trainer.checkpoint_callback
        found = getattr(callback, f"{path}_model_path", "") if callback is not None else ""
        if not found and path == "last":
            found = _newest_last_ckpt(trainer)
        if not found:
            raise ValueError(
                f"ckpt_path={path!r}: no {path} checkpoint is known for this trainer. Pass the file's "
                "path, or enable ModelCheckpoint(save_last=True) in the earlier run"
            )
        path = found
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"ckpt_path={path!r} does not exist (looked at {os.path.abspath(path)}); pass a checkpoint "
            "file written by trainmesh, 'last' or 'best'"
        )
    return path


def _newest_last_ckpt(trainer: Any) -> str:
    candidates = []
    for root, _dirs, files in os.walk(trainer.default_root_dir):
        candidates += [os.path.join(root, f) for f in files if f.startswith("last") and f.endswith(".ckpt")]
    return max(candidates, key=os.path.getmtime) if candidates else ""
