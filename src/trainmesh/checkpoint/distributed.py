"""Distributed checkpoints: a directory that every rank writes its shards into, in parallel,
with PyTorch's distributed checkpoint (DCP); loading reshards to any number of processes.

Layout of ``path/``:
  ``.metadata`` and ``__*_*.distcp``  DCP's files: the model's and optimizers' tensors
  ``trainer_state.pt``               everything else (loop position, RNG, callbacks, ...)

A save goes to a temporary directory beside ``path`` and is renamed into place only when it
is complete, so a crash mid-save leaves the previous checkpoint valid.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.checkpoint.io import atomic_save

TENSOR_KEYS = ("state_dict", "optimizer_states")
STATE_FILE = "trainer_state.pt"
METADATA_FILE = ".metadata"


def is_distributed_checkpoint(path: str | os.PathLike[str]) -> bool:
    return Path(path).is_dir()


def save_distributed(checkpoint: dict[str, Any], path: str | os.PathLike[str], *, rank: int) -> None:
    """Every rank calls this with its own (sharded) state dicts; rank 0 writes the rest."""
    import torch.distributed.checkpoint as dcp

    target = Path(path)
    staging = _shared_staging_dir(target, rank)
    tensors = {"model": checkpoint["state_dict"], "optimizers": dict(enumerate(checkpoint.get("optimizer_states", [])))}
    try:
        dcp.save(tensors, checkpoint_id=str(staging), no_dist=not _distributed())
        if rank == 0:
            atomic_save({k: v for k, v in checkpoint.items() if k not in TENSOR_KEYS}, staging / STATE_FILE)
            _replace_directory(staging, target)
    except BaseException:
        # The previous checkpoint at `path` was never touched; drop the half-written one.
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _barrier()


def load_distributed(path: str | os.PathLike[str], module: nn.Module, optimizers: list[torch.optim.Optimizer]) -> dict[str, Any]:
    """Load ``path`` into state dicts shaped like ``module``'s and ``optimizers``' own.

    The templates come from the live objects, so the shards land wherever this run keeps
    them: a checkpoint written by 2 processes loads on 1, 4, or under another strategy.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    source = Path(path)
    check_complete(source)
    metadata = dcp.FileSystemReader(str(source)).read_metadata().state_dict_metadata
    model = get_model_state_dict(module)
    saved_model = {key[len("model."):]: meta for key, meta in metadata.items() if key.startswith("model.")}
    check_state_dict_fits(model, {k: _Shape(m) for k, m in saved_model.items() if hasattr(m, "size")},
                          source=str(source))
    optimizer_states = [get_optimizer_state_dict(module, optimizer) for optimizer in optimizers]
    saved_optimizers = {key.split(".")[1] for key in metadata if key.startswith("optimizers.")}
    tensors: dict[str, Any] = {"model": model}
    if saved_optimizers:
        tensors["optimizers"] = {i: state for i, state in enumerate(optimizer_states) if str(i) in saved_optimizers}
    dcp.load(tensors, checkpoint_id=str(source), no_dist=not _distributed())
    rest = torch.load(source / STATE_FILE, map_location="cpu", weights_only=False)
    loaded = [tensors.get("optimizers", {}).get(i) for i in range(len(optimizers))]
    return {**rest, "state_dict": tensors["model"], "optimizer_states": [s for s in loaded if s is not None]}


def check_complete(path: Path) -> None:
    missing = [name for name in (METADATA_FILE, STATE_FILE) if not (path / name).exists()]
    if missing:
        raise ValueError(
            f"{path} is not a complete distributed checkpoint: {', '.join(missing)} missing (a save that "
            "was interrupted, or a directory of something else). Use the previous checkpoint, or the "
            "'last' one that was fully written"
        )


def consolidate(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> Path:
    """Turn a distributed checkpoint into one file that ``torch.load`` reads (full weights)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    src = Path(source)
    check_complete(src)
    scratch = Path(destination).with_name(f".{Path(destination).name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        dcp_to_torch_save(src, scratch)
        tensors = torch.load(scratch, map_location="cpu", weights_only=False)
    finally:
        scratch.unlink(missing_ok=True)
    rest = torch.load(src / STATE_FILE, map_location="cpu", weights_only=False)
    optimizers = tensors.get("optimizers", {})
    return atomic_save({**rest, "state_dict": tensors["model"],
                        "optimizer_states": [optimizers[k] for k in sorted(optimizers, key=int)]}, destination)


class _Shape:
    """Stands in for a tensor in a shape comparison (DCP metadata knows sizes, not values)."""

    def __init__(self, metadata: Any) -> None:
        self.shape = tuple(metadata.size)


def _shared_staging_dir(target: Path, rank: int) -> Path:
    # All ranks must write into the same new directory: rank 0 names it, the others learn it.
    name = [f".{target.name}.{uuid.uuid4().hex[:8]}.tmp" if rank == 0 else None]
    if _distributed():
        dist.broadcast_object_list(name, src=0)
    staging = target.parent / str(name[0])
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def _replace_directory(staging: Path, target: Path) -> None:
    """Put the complete new checkpoint where the old one was, the old one out of the way first."""
    retired = None
    if target.exists():
        retired = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
        os.replace(target, retired)
    os.replace(staging, target)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True) if retired.is_dir() else retired.unlink()


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()
