"""Write checkpoint files so that a crash mid-write never replaces a good file with a torn one,
and remove them so that no half-deleted checkpoint is ever visible under its name.

trainmesh's own in-between states sit beside the checkpoint ``NAME``, hidden and recognisable:
  ``.NAME.xxxxxxxx.tmp``  being written (a file by :func:`atomic_save`, a directory by ``save_distributed``)
  ``.NAME.xxxxxxxx.old``  retired: a replaced or removed checkpoint on its way out
A kill can leave either behind; ``clean_stale_temporaries`` removes them at the next start.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import pickle
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import torch

from trainmesh.checkpoint.digest import DamagedCheckpoint, read_trailer, write_trailer
from trainmesh.checkpoint.formats import UnreadableCheckpoint, damaged_record, file_problem
from trainmesh.checkpoint.load_checks import damaged_message, load_with_digest, torn_load
from trainmesh.checkpoint.marker import save_marked

# mkstemp's 8 characters are [a-z0-9_], uuid4's hex prefix [0-9a-f]: both fit.
TEMPORARY_NAME = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.(?P<kind>tmp|old)$")
_FULL_DISK = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
# What torch's PyTorchStreamWriter (inline_container.cc) says when fewer bytes were written than asked.
_SHORT_WRITE = "unexpected pos"
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # from <fcntl.h> and <linux/fs.h>


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` to a temporary file beside ``path``, fsync it, then rename over ``path``.

    The rename is atomic on POSIX file systems, so readers see the old file or the new one,
    never a partial one. The file's digest (``digest.write_trailer``) is written last, after
    every byte torch wrote and before the fsync and rename: a save cut short never carries one.
    Its first record says that it does (``marker.py``), so that a copy which lost its last bytes is
    refused, not read as a file without a digest.
    Every save trainmesh makes of one file goes through here (a background save too).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            save_marked(obj, handle)
            handle.flush()
            if write_trailer(handle.fileno()) is None:
                # No digest (an archive layout write_trailer does not know, warned there): the
                # marker would promise one, and every load would refuse the file as cut short.
                handle.seek(0)
                handle.truncate()
                torch.save(obj, handle)
                handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException as exc:
        # Interrupted or failed: drop the partial file and leave the old checkpoint as it was.
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        full = no_space_error(exc, target)
        if full is not None:
            raise full from exc
        raise
    _fsync_directory(target.parent)
    return target


def load_checkpoint_file(path: str | os.PathLike[str], *, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`atomic_save`, with a clear error when it is not there,
    torn, empty, or a file of another kind (see :func:`trainmesh.checkpoint.formats.file_problem`)."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(
            f"checkpoint {str(source)!r} does not exist (absolute: {source.resolve()}); "
            "pass the path of a .ckpt file written by trainmesh, or ckpt_path='last'"
        )
    if source.is_dir():
        raise ValueError(f"checkpoint {str(source)!r} is a directory; a single-file checkpoint was expected")
    problem = file_problem(source)
    if problem is not None:
        raise UnreadableCheckpoint(problem)
    with open(source, "rb", buffering=0) as raw:
        try:
            digest = read_trailer(raw.fileno())
        except DamagedCheckpoint as exc:
            raise DamagedCheckpoint(damaged_message(source, str(exc), clause="")) from exc
        if digest is not None:
            checkpoint = load_with_digest(source, raw, digest, map_location)
    if digest is None:  # written by older trainmesh, Lightning or torch.save: the zip's CRC-32s
        damaged = damaged_record(source)
        if damaged is not None:
            raise DamagedCheckpoint(
                f"{source} is damaged: its record {damaged} no longer matches the checksum written with it "
                "(bytes changed on disk or in a copy after the save). Nothing was loaded; resume from an "
                "earlier checkpoint of the run, or copy the file again from where it was written"
            )
        # weights_only=False: our checkpoints hold RNG states and hyperparameters, which are not
        # plain tensors. Only load checkpoints you trust, as with any pickle.
        try:
            checkpoint = torch.load(source, map_location=map_location, weights_only=False)
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
            raise torn_load(source, exc) from exc
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{source} does not hold a checkpoint dict (found {type(checkpoint).__name__})")
    return checkpoint


def no_space_error(error: BaseException, target: Path) -> OSError | None:
    """An OSError that says the disk is full and where, when ``error`` came from a full disk (or
    a quota), looking through the exceptions it wraps (torch.save and DCP wrap the OSError)."""
    cause = _full_disk_cause(error, seen=set())
    if cause is None:
        return None
    try:
        free = f"{shutil.disk_usage(target.parent).free / 1e6:.0f} MB free there now"
    except OSError:
        free = "free space unknown"
    assert cause.errno is not None  # _full_disk_cause found it in _FULL_DISK
    return OSError(
        cause.errno,
        (
            f"{_FULL_DISK[cause.errno]} while saving the checkpoint {target} (in {target.parent}, {free}); "
            "the partial file was removed and earlier checkpoints are untouched. Free some space, save "
            "elsewhere (ModelCheckpoint(dirpath=...) or Trainer(default_root_dir=...)), or keep fewer "
            "checkpoints (ModelCheckpoint(save_top_k=...))"
        ),
    )


def _full_disk_cause(error: BaseException | None, *, seen: set[int]) -> OSError | None:
    if error is None or id(error) in seen:
        return None
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in _FULL_DISK:
        return error
    if isinstance(error, RuntimeError) and _SHORT_WRITE in str(error):
        # torch's zip writer found a write cut short, which a file system does when it is full (or
        # at a quota). DCP sends each rank's exception to the others pickled, which drops the
        # OSError it came from: this message is all a rank may get of another's full disk.
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (torch: {str(error).strip()[:120]})")
    # DCP's CheckpointException holds each failed rank's exception in `failures`: {rank: (exc, trace)}.
    wrapped = [pair[0] for pair in (getattr(error, "failures", None) or {}).values() if isinstance(pair, tuple)]
    for inner in (error.__cause__, error.__context__, *wrapped):
        found = _full_disk_cause(inner, seen=seen)
        if found is not None:
            return found
    return None


def hidden_sibling(target: Path, kind: str) -> Path:
    """A fresh ``.NAME.xxxxxxxx.KIND`` path beside ``target`` (KIND: "tmp" or "old")."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.{kind}")


def remove_checkpoint(path: str | os.PathLike[str]) -> None:
    """Delete a checkpoint so that it never shows half-deleted under its name: a directory is
    renamed out of sight in one step first, then deleted (a kill meanwhile leaves a ``.old``)."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        retired = hidden_sibling(target, "old")
        os.replace(target, retired)
        delete_entry(retired)
    elif os.path.lexists(target):
        target.unlink()  # one step: a file is there whole or not at all


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap what two existing paths name in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``,
    ext4, xfs, btrfs, tmpfs...); False where the system or file system cannot (NFS, Lustre, macOS)."""
    rename = _renameat2()
    if rename is None:
        return False
    if rename(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


@functools.cache
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def delete_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
