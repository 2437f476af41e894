"""pytorch-lightning 1.9.5's ``pytorch_lightning.utilities.cloud_io`` (1.8 deprecated it, 2.0 removed it):
``load``, ``get_filesystem`` and ``atomic_save`` under the old module name, each warning with today's
home as 1.9.5 warns. Published 1.x code imports it at module level (``from
pytorch_lightning.utilities.cloud_io import load as pl_load`` to read a checkpoint), so without it the
program stops at its imports. A remote path needs fsspec (``pip install fsspec``), as in 1.9.5.

>>> import io, torch
>>> from trainmesh.utilities.cloud_io import load
>>> buffer = io.BytesIO(); torch.save({"w": torch.ones(1)}, buffer); _ = buffer.seek(0)
>>> load(buffer)  # doctest: +SKIP
{'w': tensor([1.])}
"""

from __future__ import annotations

import functools
import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainmesh.utilities.refusal import LightningOneName

__all__ = ["atomic_save", "get_filesystem", "load", "new_atomic_save", "new_get_filesystem", "new_load"]


def _warn(name: str, today: str) -> None:
    warnings.warn(
        f"trainmesh.utilities.cloud_io.{name} is pytorch-lightning 1.x's name (1.8 deprecated it, 2.0 removed "
        f"it); today: {today}",
        LightningOneName,
        stacklevel=3,
    )


def _deprecated(name: str, today: str, new: Callable[..., Any]) -> Callable[..., Any]:
    """1.9.5's ``name``: ``new`` (its ``new_*`` alias, silent) after the deprecation line."""

    @functools.wraps(new)
    def old(*args: Any, **kwargs: Any) -> Any:
        _warn(name, today)
        return new(*args, **kwargs)

    old.__name__ = old.__qualname__ = name
    return old


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def new_load(path_or_url: Any, map_location: Any = None) -> Any:
    """``torch.load`` of a file object, a local path, an fsspec URL, or an ``http(s)`` URL (through
    ``torch.hub``), with ``map_location``, as 1.9.5's (torch's default ``weights_only``).

    Args:
        path_or_url: a file object, a path or a URL.
        map_location: where tensors go, as ``torch.load`` takes it.

    Examples:
        >>> checkpoint = load("model.ckpt", map_location="cpu")  # doctest: +SKIP
    """
    if not isinstance(path_or_url, (str, Path)):
        return torch.load(path_or_url, map_location=map_location)
    path = str(path_or_url)
    if path.startswith("http"):
        return torch.hub.load_state_dict_from_url(path, map_location=map_location)
    if _is_local(path):
        with open(path.removeprefix("file://"), "rb") as file:
            return torch.load(file, map_location=map_location)
    with _filesystem(path).open(path, "rb") as file:
        return torch.load(file, map_location=map_location)


def new_get_filesystem(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """The fsspec filesystem of ``path`` (``LocalFileSystem`` for a local path), as 1.9.5's.

    Args:
        path: a local path or a URL (``s3://...``).
        **kwargs: the filesystem's options (``fsspec.core.url_to_fs``).

    Examples:
        >>> get_filesystem("/tmp").exists("/tmp")  # doctest: +SKIP
        True
    """
    return _filesystem(str(path), **kwargs)


def new_atomic_save(checkpoint: Any, filepath: str | os.PathLike[str]) -> None:
    """``torch.save(checkpoint)`` into memory first, then written to ``filepath`` in one write.

    Args:
        checkpoint: what ``torch.save`` takes.
        filepath: a local path or an fsspec URL.

    Examples:
        >>> atomic_save({"w": torch.ones(1)}, "w.ckpt")  # doctest: +SKIP
    """
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    path = str(filepath)
    if _is_local(path):
        with open(path.removeprefix("file://"), "wb") as file:
            file.write(buffer.getvalue())
        return
    import fsspec  # type: ignore[import-untyped]

    with fsspec.open(path, "wb") as file:
        file.write(buffer.getvalue())


def _filesystem(path: str, **kwargs: Any) -> Any:
    try:
        from fsspec.core import url_to_fs  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(f"{path!r}: reading a filesystem by URL needs fsspec (pip install fsspec)") from None
    return url_to_fs(path, **kwargs)[0]


# 1.9.5's names: each warns, then runs its new_* (1.9.5 imported those from Fabric under these names)
load = _deprecated("load", "torch.load (or trainmesh.Module.load_from_checkpoint)", new_load)
get_filesystem = _deprecated("get_filesystem", "fsspec.core.url_to_fs(path)[0]", new_get_filesystem)
atomic_save = _deprecated("atomic_save", "torch.save (or trainer.save_checkpoint)", new_atomic_save)
