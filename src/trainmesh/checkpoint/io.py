"""Write checkpoint files so that a crash mid-write never replaces a good file with a torn one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` to a temporary file beside ``path``, fsync it, then rename over ``path``.

    The rename is atomic on POSIX file systems, so readers see the old file or the new one,
    never a partial one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        # Interrupted or failed: drop the partial file and leave the old checkpoint as it was.
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(target.parent)
    return target


def load_checkpoint_file(path: str | os.PathLike[str], *, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`atomic_save`, with a clear error when it is not there."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(
            f"checkpoint {str(source)!r} does not exist (absolute: {source.resolve()}); "
            "pass the path of a .ckpt file written by trainmesh, or ckpt_path='last'"
        )
    if source.is_dir():
        raise ValueError(
            f"checkpoint {str(source)!r} is a directory; a single-file checkpoint was expected"
        )
    # weights_only=False: our checkpoints hold RNG states and hyperparameters, which are not
    # plain tensors. Only load checkpoints you trust, as with any pickle.
    checkpoint = torch.load(source, map_location=map_location, weights_only=False)
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{source} does not hold a checkpoint dict (found {type(checkpoint).__name__})")
    return checkpoint


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
