"""The run's checkpoint saves, a service the Runtime owns (``runtime.checkpoints.saves``): written at
once, or in the background through the ``AsyncCheckpointIO`` a Trainer was given in ``plugins``.

The Trainer asks for background saves around fit and for the saves to be finished; this service
drives the writer (open, wait, close) and, through the Runtime's collectives, the agreement on
whether any rank's save failed, so the trainer side holds no distributed object of its own.

A save returns once the state is staged in host memory (``writers.py``); the next save waits for
the one before. Everything that ends a fit waits too, so that what a run reports saved is on disk
when it says so: the end of fit (every rank, then they agree whether any save failed), a stop
signal's save (SIGTERM/SIGUSR1: saved and waited for before the exit with status 75), and an
exception (the save in flight is finished; its own error is added to the exception's notes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from trainmesh.checkpoint.writers import SYNCHRONOUS, AsyncCheckpointIO, CheckpointWriter

# What Lightning's `plugins` takes, and trainmesh's way to ask for each (or why there is none).
_OTHER_PLUGINS = (
    "trainmesh takes AsyncCheckpointIO in plugins; for a precision plugin use Trainer(precision=...) "
    "(e.g. '16-mixed', 'bf16-mixed'), for a cluster environment nothing (torchrun and SLURM are detected), "
    "and other CheckpointIO plugins are not supported (checkpoints are written atomically by trainmesh)"
)


def background_writer(plugins: Any) -> AsyncCheckpointIO | None:
    """The AsyncCheckpointIO among Lightning-style ``plugins`` (None: saves are written at once)."""
    if plugins is None:
        return None
    given = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    writers = []
    for plugin in given:
        if isinstance(plugin, AsyncCheckpointIO):
            writers.append(plugin)
        elif type(plugin).__name__ == "AsyncCheckpointIO":
            raise TypeError(
                f"plugins=[{type(plugin).__module__}.AsyncCheckpointIO()] is another library's; use "
                "trainmesh's: from trainmesh.checkpoint import AsyncCheckpointIO"
            )
        else:
            raise TypeError(f"Trainer(plugins=...) got {plugin!r}: {_OTHER_PLUGINS}")
    if len(writers) > 1:
        raise ValueError(f"Trainer(plugins=...) got {len(writers)} AsyncCheckpointIO plugins; pass one")
    return writers[0] if writers else None


class CheckpointSaves:
    """Who writes the Trainer's checkpoints, and waiting for them.

    ``gather``: an object from every rank, in rank order (the Runtime's ``all_gather_object``);
    ``paused``: a block the watchdog does not time (the Runtime's ``supervision.paused``).
    """

    def __init__(self, gather: Callable[[Any], list[Any]], paused: Callable[[], AbstractContextManager[Any]]) -> None:
        self._gather, self._paused = gather, paused
        self.background: AsyncCheckpointIO | None = None  # set from the Trainer's plugins

    def use_plugins(self, plugins: Any) -> None:
        """Write in the background through the AsyncCheckpointIO among ``plugins``, if any."""
        self.background = background_writer(plugins)

    @property
    def writer(self) -> CheckpointWriter:
        return SYNCHRONOUS if self.background is None else self.background

    def after_save(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the save in flight is complete, if it succeeded; at once when none is."""
        self.writer.after_save(action)

    @contextlib.contextmanager
    def in_background(self, *, model: Any = None, optimizers: Sequence[Any] = ()) -> Iterator[None]:
        """Saves made in the block go to the background; leaving it waits for the save in flight
        (every rank: a collective, unless an exception ends the block). The staging memory for
        ``model`` and ``optimizers`` is allocated ahead of the first save (``AsyncCheckpointIO.open``)."""
        writer = self.background
        if writer is None:
            yield
            return
        # The torch optimizers themselves (the Runtime wraps each): their step hooks start the allocation.
        writer.open(model, [getattr(optimizer, "optimizer", optimizer) for optimizer in optimizers])
        try:
            yield
        except BaseException as exc:
            # Unwinding: finish the save in flight (no collective: a peer may be gone) and say if it failed too.
            try:
                writer.close()
            except Exception as save_error:  # noqa: BLE001 - reported on the exception that is on its way
                note = f"the checkpoint save in flight failed too: {type(save_error).__name__}: {save_error}"
                getattr(exc, "add_note", print)(note)  # Python 3.10 shows no notes: printed there
            raise
        try:
            self.finish()
        finally:
            writer.close()

    def finish(self) -> None:
        """Every rank at once: wait for this rank's save in flight, then learn whether any rank's
        failed; every rank raises if one did (a rank that raised alone would leave the others waiting)."""
        writer = self.background
        if writer is None:
            return
        error: Exception | None = None
        with self._paused():  # a write may take longer than a step
            try:
                writer.wait()
            except Exception as exc:  # noqa: BLE001 - raised below, after the others have heard of it
                error = exc
            said = self._gather(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        failed = [(rank, text) for rank, text in enumerate(said) if text]
        if failed:
            rank, text = failed[0]
            raise RuntimeError(f"the checkpoint save in flight on rank {rank} failed: {text}")
