"""Which piece of the batch is running right now, when dp/ddp2 split a batch across devices.

The data-parallel code sets it around each chunk's step (in the thread that runs it); the
Trainer's metric sink reads it, so a ``self.log`` inside ``*_step`` is weighted by the chunk's
own size rather than the whole batch's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_current_chunk: ContextVar[Any] = ContextVar("trainmesh_current_chunk", default=None)


@contextlib.contextmanager
def running_chunk(chunk: Any) -> Iterator[None]:
    token = _current_chunk.set(chunk)
    try:
        yield
    finally:
        _current_chunk.reset(token)


def current_chunk() -> Any:
    """The chunk being stepped, or None outside a split batch."""
    return _current_chunk.get()
