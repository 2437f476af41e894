"""Lightning 2.6's ``weights_only`` for the checkpoints the Trainer reads: what ``torch.load`` would
refuse, refused with torch's own error, before trainmesh's own load (digest, shards) reads it."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from trainmesh.checkpoint.formats import file_problem
from trainmesh.checkpoint.layout import STATE_FILE


def check_weights_only(path: str | os.PathLike[str], weights_only: bool | None) -> None:
    """Stop as Lightning's ``torch.load(path, weights_only=weights_only)`` stops.

    With True, or None where ``torch.load``'s default is True (torch 2.6 on), a checkpoint holding
    classes or functions outside torch's allowlist raises torch's ``UnpicklingError``. Only the
    pickle is read (no tensor) unless such a global is found; then torch decides (its default,
    ``add_safe_globals`` / ``safe_globals``), raising or loading what the user allowed.

    Args:
        path: a checkpoint file, or a distributed checkpoint's folder (its state file is checked).
        weights_only: Lightning's argument: False reads anything, True or None as torch.load.

    Examples:
        >>> check_weights_only("does-not-exist.ckpt", True)  # nothing to check: the load reports it
    """
    if weights_only is False:
        return
    source = Path(path)
    if source.is_dir():  # a distributed checkpoint: its loop, callbacks and hyperparameters are one file
        source = source / STATE_FILE
    if not source.is_file() or file_problem(source) is not None:
        return  # trainmesh's load that follows names what the file is
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(source)
    except Exception:  # noqa: BLE001 - a damaged archive: the load that follows says where, with the digest
        return
    if not unsafe:
        return
    torch.load(source, map_location="cpu", weights_only=weights_only)
