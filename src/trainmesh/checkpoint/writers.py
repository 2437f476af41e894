"""Who writes a checkpoint, and when: at once (the default), or in the background while training
goes on (``AsyncCheckpointIO``, Lightning's name: ``Trainer(plugins=[AsyncCheckpointIO()])``).

A background save copies the state to host memory on the caller's thread, with torch DCP's own
stager (``DefaultStager``, what ``torch.distributed.checkpoint.async_save`` stages with: every
tensor, DTensor shards included, into CPU storages it keeps and refills at the next save; the
rest deep-copied), so training may change the live tensors at once. One background thread then
writes that copy through the functions a synchronous save calls (``atomic_save``,
``save_distributed``): the same temporary name, fsync and atomic rename, so a kill at any moment
leaves the previous checkpoint or the new one under the name, never a torn one.

- One save in flight: a save first waits for the one before (whose staging buffers it refills).
- What must follow a save (deleting a checkpoint that dropped out of the top k) runs after it in
  the same thread, and only if it succeeded: a kill never leaves the older file gone and the new
  one incomplete.
- A background save's error is raised by the next save, or by ``wait``.
- The staging memory is allocated (and its pages touched) in the background before the first save
  (:meth:`AsyncCheckpointIO.open` with the model and optimizers): the model's when fit starts, an
  optimizer's after its first step (when its state exists). The first save then only copies, as the
  later ones do, instead of stalling training while the kernel hands out ~one checkpoint of pages.
- A distributed save's collectives (DCP's planning, the staging folder's name, the final barrier)
  run in the background on a gloo process group of their own, so they never interleave with the
  training's collectives on the default group.
"""

from __future__ import annotations

import concurrent.futures
import functools
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch
import torch.distributed as dist

from trainmesh.checkpoint.io import atomic_save


class CheckpointWriter(Protocol):
    """How a strategy's ``save_checkpoint`` writes: a file (one rank) or a distributed checkpoint (every rank)."""

    def write_file(self, checkpoint: dict[str, Any], path: str) -> None: ...
    def write_distributed(
        self, checkpoint: dict[str, Any], path: str, *, rank: int, sharded_keys: Sequence[str]
    ) -> None: ...
    def after_save(self, action: Callable[[], None]) -> None: ...


def _save_distributed(checkpoint: dict[str, Any], path: str, **options: Any) -> None:
    # DCP's writer is imported by the first sharded save, not by every run that may save a file.
    from trainmesh.checkpoint.distributed import save_distributed

    save_distributed(checkpoint, path, **options)


class SynchronousWriter:
    """Writes before returning (the default)."""

    in_background = False

    def write_file(self, checkpoint: dict[str, Any], path: str) -> None:
        atomic_save(checkpoint, path)

    def write_distributed(
        self, checkpoint: dict[str, Any], path: str, *, rank: int, sharded_keys: Sequence[str]
    ) -> None:
        _save_distributed(checkpoint, path, rank=rank, sharded_keys=sharded_keys)

    def after_save(self, action: Callable[[], None]) -> None:
        action()


SYNCHRONOUS = SynchronousWriter()


class AsyncCheckpointIO:
    """Save checkpoints in a background thread while training continues (see the module's docstring).

    During ``fit`` a save returns once the state is copied to host memory (the training stall);
    the end of fit, a stop signal's save (SIGTERM/SIGUSR1) and the next save wait for the one in
    flight and raise its error. Host memory holds one more copy of the checkpoint's tensors while
    fit runs. Outside fit (``trainer.save_checkpoint`` after it) a save is written before it returns.

    >>> from trainmesh import Trainer
    >>> trainer = Trainer(plugins=[AsyncCheckpointIO()], logger=False, enable_progress_bar=False)
    """

    in_background = True

    def __init__(self, checkpoint_io: Any = None) -> None:
        if checkpoint_io is not None:
            raise ValueError(
                f"AsyncCheckpointIO(checkpoint_io={type(checkpoint_io).__name__}(...)): trainmesh writes through "
                "its own atomic file and distributed-checkpoint writers and takes no other CheckpointIO; "
                "use AsyncCheckpointIO()"
            )
        self._open = False
        self._executor: ThreadPoolExecutor | None = None
        self._futures: list[Future[None]] = []  # the save in flight first, then what follows it
        self._stager: Any = None  # DCP's DefaultStager while open (it keeps the staging memory)
        self._group: Any = None  # the background collectives' process group
        self._prestaging: list[Future[None]] = []  # staging memory being allocated before the first save
        self._step_hooks: list[Any] = []  # the optimizers' step hooks that start it (removed by the first save)
        self._prestaged: set[int] = set()  # the optimizers whose state is prestaged

    def open(self, model: torch.nn.Module | None = None, optimizers: Sequence[torch.optim.Optimizer] = ()) -> None:
        """Saves from now on go to the background (the Trainer calls this when fit starts, with the
        model and the optimizers whose staging memory to allocate ahead of the first save)."""
        self._open = True
        if self._stager is None:
            self._stager = _new_stager()  # here, not in the first save: importing DCP takes a second
        if model is not None:
            self._prestage([t.detach() for t in (*model.parameters(), *model.buffers())])
        for optimizer in optimizers:
            # Adam's moments exist after its first step only: their memory is allocated then.
            self._step_hooks.append(optimizer.register_step_post_hook(self._after_first_step))

    def close(self) -> None:
        """Wait for the save in flight (raising its error), then free the thread and the staging memory."""
        self._open = False
        try:
            self.wait()
        finally:
            self._end_prestaging()
            self._prestaged.clear()
            if self._executor is not None:
                self._executor.shutdown(wait=True)
            if self._stager is not None:
                self._stager.close()  # frees the staging memory (and breaks the stager's reference cycle)
            if self._group is not None and self._group in dist.distributed_c10d._world.pg_map:
                # The next run makes its own: kept, each fit's group (3 threads, 5 fds) stayed for
                # good. Local to this rank (no peer joins), and no save uses it any more.
                dist.destroy_process_group(self._group)
            self._executor, self._stager, self._group = None, None, None

    def write_file(self, checkpoint: dict[str, Any], path: str) -> None:
        self.wait()  # one in flight: the previous save is complete before its buffers are refilled
        self._end_prestaging()
        if not self._open:
            atomic_save(checkpoint, path)
            return
        self._submit(functools.partial(atomic_save, self._stage(checkpoint), path), path)

    def write_distributed(
        self, checkpoint: dict[str, Any], path: str, *, rank: int, sharded_keys: Sequence[str]
    ) -> None:
        self.wait()
        self._end_prestaging()
        if not self._open:
            _save_distributed(checkpoint, path, rank=rank, sharded_keys=sharded_keys)
            return
        group = self._checkpoint_group()
        staged = self._stage(checkpoint)
        save = functools.partial(_save_distributed, staged, path, rank=rank, sharded_keys=sharded_keys)
        self._submit(functools.partial(save, process_group=group), path)

    def after_save(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the save in flight is complete, if it succeeded; at once when none is."""
        if not self._futures:
            action()
            return
        save = self._futures[0]
        assert self._executor is not None
        # One worker thread: this runs after the save, which is done by then.
        self._futures.append(self._executor.submit(lambda: None if save.exception() else action()))

    def wait(self) -> None:
        """Block until the save in flight (and what follows it) is complete; raise its error."""
        if not self._futures:
            return
        concurrent.futures.wait(self._futures)  # a Ctrl-C here leaves them pending, to wait for again
        futures, self._futures = self._futures, []
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error

    @property
    def in_flight(self) -> bool:
        return bool(self._futures)

    def _after_first_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """An optimizer's step hook until the first save removes it (a hook cannot remove itself
        while torch iterates over the hooks): after its first step, its state's staging memory."""
        if id(optimizer) not in self._prestaged:
            self._prestaged.add(id(optimizer))
            # Listed here, on the training thread: a later step may add entries to the state.
            self._prestage([t for state in optimizer.state.values() for t in _tensors_in(state)])

    def _prestage(self, tensors: list[torch.Tensor]) -> None:
        """Stage ``tensors`` in the background, for the staging memory it allocates: DCP's stager
        keeps a CPU storage per storage staged and refills it at the next save. The copy itself is
        thrown away (training may change the tensors meanwhile); the first save copies anew."""
        stager = self._stager

        def allocate() -> None:
            try:
                stager.stage({"tensors": tensors})
            except Exception:  # noqa: BLE001 - only a speed-up: the first save then allocates what it needs
                pass

        if tensors:
            self._prestaging.append(self._thread().submit(allocate))

    def _end_prestaging(self) -> None:
        """Before a save stages (and before the stager is closed): the allocation done."""
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks.clear()
        concurrent.futures.wait(self._prestaging)
        self._prestaging.clear()

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # Its thread is joined at interpreter exit: a save in flight is finished even then.
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainmesh-checkpoint")
        return self._executor

    def _submit(self, save: Callable[[], Any], path: str) -> None:

        def run() -> None:
            try:
                save()
            except BaseException as exc:
                add_note(
                    exc,
                    f"raised by the background save of {path} (AsyncCheckpointIO); the checkpoint that was "
                    "under that name before is untouched",
                )
                raise

        self._futures.append(self._thread().submit(run))

    def _stage(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        assert self._stager is not None, "staging happens between open() and close()"
        staged: dict[str, Any] = self._stager.stage(checkpoint)
        return staged

    def _checkpoint_group(self) -> Any:
        if self._group is None and dist.is_available() and dist.is_initialized():
            # Every rank makes the same save (a collective), so every rank creates it here, in the
            # same order. gloo: DCP's collectives exchange Python objects through CPU tensors.
            self._group = dist.new_group(backend="gloo")
        return self._group


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_in(item)]
    return []


def _new_stager() -> Any:
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    # Pinned host memory makes the copy from a GPU faster; it needs CUDA.
    options = StagingOptions(
        use_pinned_memory=torch.cuda.is_available(),
        use_shared_memory=False,
        use_async_staging=False,
        use_non_blocking_copy=False,
    )
    return DefaultStager(options)


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (Python 3.11+); on 3.10, which shows no notes, the note goes to stderr."""
    adder = getattr(error, "add_note", None)
    if adder is not None:
        adder(note)
    else:
        print(f"trainmesh: {note}", file=sys.stderr, flush=True)
