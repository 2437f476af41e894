"""Lightning's ``is_shared_filesystem``: whether every process sees the same files under a path.

>>> is_shared_filesystem(None)  # one process: trivially shared
True
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import torch


def is_shared_filesystem(strategy: Any, path: str | os.PathLike[str] | None = None, timeout: int = 3) -> bool:
    """Whether the filesystem under ``path`` (default: the working directory) is shared by all
    processes, found as Lightning finds it: a remote URL is; one process is; a path that differs
    between ranks is not; else rank 0 writes ``.lightning_shared_fs_check`` there and the others
    look for it for up to ``timeout`` seconds. Every process must call it.

    Args:
        strategy: the run's strategy (``trainer.strategy``); its processes are the process group's.
        path: a folder or file every process can write beside (default: the working directory).
        timeout: seconds the other ranks wait to see rank 0's file.

    Examples:
        >>> is_shared_filesystem(None, "s3://bucket/run")
        True
    """
    if path is not None and "://" in str(path) and not str(path).startswith("file://"):
        return True
    path = Path(Path.cwd() if path is None else path).resolve()
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed or torch.distributed.get_world_size() == 1:
        return True
    if not _all(_broadcast(path) == path):
        return False
    if not _all(path.exists()):
        raise FileNotFoundError(
            f"Unable to determine if the path belongs to a shared filesystem. The path does not exist: {path}"
        )
    path = path.parent if path.is_file() else path
    check_file = path / ".lightning_shared_fs_check"
    check_file.unlink(missing_ok=True)
    torch.distributed.barrier()
    found = torch.distributed.get_rank() == 0
    if found:
        check_file.touch()
    else:
        start = time.perf_counter()
        while not found and time.perf_counter() - start < timeout:
            found = check_file.exists()
    torch.distributed.barrier()
    shared = _all(found)
    with contextlib.suppress(OSError):  # another rank may have deleted it first
        check_file.unlink()
    return shared


def _broadcast(value: Any) -> Any:
    holder = [value]
    torch.distributed.broadcast_object_list(holder, src=0)
    return holder[0]


def _all(decision: bool) -> bool:
    answers: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(answers, bool(decision))
    return all(answers)


def local_path(path: str | os.PathLike[str] | None, where: str) -> str | os.PathLike[str] | None:
    """``path`` as a local path (a ``file://`` URL without its scheme), or stop before training on a URL
    such as ``s3://bucket/run``: Lightning writes there through fsspec, trainmesh writes local files
    only, and would otherwise make a local folder named ``s3:`` and leave the remote store empty.

    Examples:
        >>> local_path("runs/a", "default_root_dir"), local_path("file:///tmp/run", "default_root_dir")
        ('runs/a', '/tmp/run')
        >>> local_path("s3://bucket/run", "default_root_dir")
        Traceback (most recent call last):
        ...
        ValueError: default_root_dir='s3://bucket/run' is a remote URL (s3://): trainmesh writes and reads local files only (Lightning goes through fsspec); use a local folder, or a mounted one, and copy it to the store afterwards
    """
    if path is None:
        return None
    text = os.fspath(path)
    scheme, separator, rest = text.partition("://")
    if not separator or not scheme or "/" in scheme:
        return path
    if scheme == "file":
        return rest
    raise ValueError(
        f"{where}={text!r} is a remote URL ({scheme}://): trainmesh writes and reads local files only "
        "(Lightning goes through fsspec); use a local folder, or a mounted one, and copy it to the store afterwards"
    )
