"""Manual optimization on a split batch: the chunks run ``training_step`` in lockstep.

Under ddp every rank runs ``training_step`` on its share of the batch; a ``manual_backward``
leaves every rank the average of the ranks' gradients, and ``opt.step()`` then runs on every
rank with the same gradients. dp (and ddp2 within a process) split a batch into chunks that run
on the module one after another (``data_parallel.run_chunks_in_turn``), which a step that calls
``opt.step()`` cannot do: the second chunk would see the stepped weights, and the optimizer would
step once per chunk. So here each chunk runs ``training_step`` in a thread of its own, one thread
at a time, as a ddp rank would, and the chunks meet at each call of manual optimization:

- ``manual_backward``: once every chunk has its loss, one backward of their mean, which leaves
  each parameter the mean of the chunks' gradients, as ddp's average of the ranks' does;
- ``opt.step()``, ``opt.zero_grad()``, ``toggle_optimizer``, ``clip_gradients``, a scheduler's
  ``step()``: run once, by the last chunk to arrive;
- ``opt.step(closure)``: the optimizer's closure runs every chunk's closure, then the backward of
  their losses' mean.

Each chunk starts from the step's random state and forward-time state (buffers, frozen
parameters) and keeps its own until the step ends, when chunk 0's is kept (as in
``run_chunks_in_turn``: dropout masks and BatchNorm statistics as on ddp's ranks). Chunks that do
not make the same calls in the same order (a branch on a chunk's data) stop the step with an error
naming both calls, where ddp would wait for ever.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.strategies.data_parallel import ChunkScope, forward_time_state, gather_outputs, split_batch
from trainmesh.strategies.step import ManualSync, call_hook


class _Abandoned(Exception):
    """Raised in a waiting chunk's thread when another chunk failed: the step is over."""


class Lockstep(ManualSync):
    """One step's chunks in lockstep (module docstring). ``prepare(loss)`` runs before a backward
    outside ``sync_off()`` (ddp2: DDP's reducer is prepared for the chunks' mean loss)."""

    def __init__(
        self,
        module: nn.Module,
        *,
        context: Callable[[], AbstractContextManager[Any]],
        prepare: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        self._module, self._context, self._prepare = module, context, prepare
        self.parts = 1
        self._condition = threading.Condition()
        self._chunk = threading.local()  # .index: the chunk this thread runs
        self._count = 0
        self._turn = 0
        self._round = 0  # meetings held so far
        self._arrived: list[tuple[str, Any] | None] = []
        self._finished: list[bool] = []
        self._outcome: Any = None
        self._failure: BaseException | None = None
        self._sync_off: list[int] = []
        # inside opt.step(closure): each chunk's manual_backward (its loss and the run of it)
        self._collecting: list[tuple[torch.Tensor, Callable[[torch.Tensor], None]]] | None = None
        self._states: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
        self._shared: list[torch.Tensor] = []
        self._scopes: list[Callable[[], AbstractContextManager[Any]]] = []

    # ---- running the chunks ------------------------------------------------------------------
    def run(
        self,
        hook: str,
        batch: Any,
        args: tuple[Any, ...],
        chunks: int,
        chunk_scope: ChunkScope,
        call: Callable[..., Any] | None = None,
    ) -> Any:
        """``module.<hook>(chunk, *args)`` on each of ``chunks`` pieces of ``batch``, in lockstep;
        the outputs gathered. ``context()`` is entered in each chunk's thread (autocast); ``call``:
        ``StepHooks.call``."""
        context = self._context
        pieces = split_batch(batch, chunks)
        self._count = self.parts = len(pieces)
        self._arrived, self._finished = [None] * self._count, [False] * self._count
        self._sync_off = [0] * self._count
        self._shared = forward_time_state(self._module)
        start = (torch.get_rng_state(), [t.detach().clone() for t in self._shared])
        self._states = [(start[0], [t.clone() for t in start[1]]) for _ in pieces]
        self._scopes = [functools.partial(chunk_scope, piece) for piece in pieces]
        if self._count == 1:  # nothing to meet: the step's own thread runs it
            with chunk_scope(pieces[0]):
                return gather_outputs([call_hook(self._module, hook, (pieces[0], *args), call)])
        outputs: list[Any] = [None] * self._count
        grad_enabled = torch.is_grad_enabled()

        def chunk(index: int) -> None:
            self._chunk.index = index
            try:
                with torch.set_grad_enabled(grad_enabled), context(), self._scopes[index]():
                    self._wait_for_turn(index, self._round)
                    outputs[index] = call_hook(self._module, hook, (pieces[index], *args), call)
                self._finish(index)
            except _Abandoned:
                pass
            except BaseException as failure:  # noqa: BLE001  # handed to the step's thread below
                self._fail(failure)

        threads = [
            threading.Thread(target=chunk, args=(i,), name=f"trainmesh-chunk-{i}", daemon=True)
            for i in range(self._count)
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except BaseException as interrupted:  # Ctrl-C here: the chunks' threads stop waiting too
            self._fail(interrupted)
            raise
        if self._failure is not None:
            raise self._failure
        self._switch_in(0)  # the step ends with chunk 0's random and forward-time state
        return gather_outputs(outputs)

    def _wait_for_turn(self, index: int, held: int) -> None:
        """Wait (holding nothing) until it is ``index``'s turn after meeting ``held`` was held."""
        with self._condition:
            self._condition.wait_for(lambda: self._failure is not None or (self._turn == index and self._round >= held))
            if self._failure is not None:
                raise _Abandoned
        self._switch_in(index)

    def _hand_on(self, index: int) -> None:
        """Called with the condition held: the next chunk runs."""
        self._switch_out(index)
        self._turn = (index + 1) % self._count
        self._condition.notify_all()

    def _finish(self, index: int) -> None:
        with self._condition:
            waiting = next((what for what in self._arrived if what is not None), None)
            if waiting is not None:
                self._diverged(f"chunk {index} returned from training_step", f"{waiting[0]}")
            self._finished[index] = True
            self._hand_on(index)

    def _fail(self, failure: BaseException) -> None:
        with self._condition:
            if self._failure is None:
                self._failure = failure
            self._condition.notify_all()

    def _diverged(self, this: str, other: str) -> None:
        raise RuntimeError(
            f"under a strategy that splits the batch (dp, ddp2), every chunk of a manual-optimization step must "
            f"make the same calls in the same order, as ddp's ranks must; here {this} where an earlier chunk "
            f"made {other}. Branch on values every chunk shares (batch_idx, the step count), not on a chunk's data"
        )

    # ---- the state each chunk keeps ----------------------------------------------------------
    def _switch_out(self, index: int) -> None:
        self._states[index] = (torch.get_rng_state(), [t.data for t in self._shared])

    def _switch_in(self, index: int) -> None:
        rng, tensors = self._states[index]
        torch.set_rng_state(rng)
        for tensor, value in zip(self._shared, tensors):
            # .data, not copy_(): autograd saved these tensors in the chunks' forward passes.
            tensor.data = value

    # ---- where the chunks meet (ManualSync) ------------------------------------------------
    def _meet(self, what: str, value: Any, action: Callable[[list[Any]], Any]) -> Any:
        """Every chunk calls this with the same ``what``; the last to arrive runs ``action`` on
        their values (in chunk order), and each gets its result."""
        index = getattr(self._chunk, "index", None)
        if index is None or self._count < 2 or self._collecting is not None:
            return action([value])  # not inside a chunk, or inside a meeting's own action
        with self._condition:
            earlier = next((a for a in self._arrived if a is not None), None)
            if any(self._finished):
                self._diverged(f"chunk {index} made {what}", "no more calls (it returned from training_step)")
            if earlier is not None and earlier[0] != what:
                self._diverged(f"chunk {index} made {what}", earlier[0])
            self._arrived[index] = (what, value)
            held = self._round + 1
            if index == self._count - 1:
                values = [a[1] for a in self._arrived if a is not None]
                self._arrived = [None] * self._count
                self._outcome = action(values)
                self._round = held
            self._hand_on(index)
        self._wait_for_turn(index, held)
        # No other meeting is held before every chunk has taken its turn: the result is this one's.
        return self._outcome

    def backward(self, loss: torch.Tensor, run: Callable[[torch.Tensor], None]) -> None:
        if self._collecting is not None:  # a chunk's closure inside opt.step(closure)
            self._collecting.append((loss, run))
            return
        index = getattr(self._chunk, "index", 0)
        off = bool(self._sync_off[index]) if self._sync_off else False
        self._meet(
            f"manual_backward{' inside no_backward_sync' if off else ''}",
            loss,
            lambda losses: self._backward(losses, run, off),
        )

    def _backward(self, losses: list[torch.Tensor], run: Callable[[torch.Tensor], None], sync_off: bool) -> None:
        mean = losses[0] if len(losses) == 1 else torch.stack([loss.reshape(()) for loss in losses]).mean()
        if self._prepare is not None and not sync_off:
            self._prepare(mean)
        run(mean)

    def once(self, action: Callable[[], Any], *, what: str) -> Any:
        return self._meet(what, None, lambda _: action())

    def step(
        self, step: Callable[[Callable[[], Any] | None], Any], closure: Callable[[], Any] | None, *, what: str
    ) -> Any:
        def run(closures: list[Callable[[], Any] | None]) -> Any:
            if all(c is None for c in closures):
                return step(None)
            if any(c is None for c in closures):
                self._diverged(f"{what} without a closure", f"{what} with one")
            return step(lambda: self._run_closures(closures))

        return self._meet(what, closure, run)

    def _run_closures(self, closures: list[Any]) -> Any:
        """The optimizer's closure: each chunk's (its forward, in its own state), then one backward
        of their losses' mean. Returns the mean of what they returned."""
        here = getattr(self._chunk, "index", self._count - 1)
        collected: list[tuple[torch.Tensor, Callable[[torch.Tensor], None]]] = []
        results = []
        self._switch_out(here)
        try:
            for index, closure in enumerate(closures):
                self._switch_in(index)
                self._collecting = collected
                try:
                    with self._scopes[index]():
                        results.append(closure())
                finally:
                    self._collecting = None
                self._switch_out(index)
        finally:
            self._switch_in(here)
        if collected:
            self._backward([loss for loss, _ in collected], collected[0][1], bool(self._sync_off[here]))
        tensors = [r for r in results if isinstance(r, torch.Tensor)]
        return (
            torch.stack([t.detach().reshape(()) for t in tensors]).mean()
            if len(tensors) == len(results)
            else results[0]
        )

    @contextlib.contextmanager
    def sync_off(self) -> Iterator[None]:
        """``no_backward_sync`` inside a chunk: its backward calls leave the gradients local."""
        index = getattr(self._chunk, "index", 0)
        self._sync_off[index] += 1
        try:
            yield
        finally:
            self._sync_off[index] -= 1
