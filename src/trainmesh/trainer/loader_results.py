"""What an evaluation run keeps per loader as its batches move from one loader to the next: each
loader's metric results (not yet reduced across ranks) or predictions, and the step outputs 1.x's
``validation_epoch_end`` / ``test_epoch_end`` are given."""

from __future__ import annotations

from typing import Any

from trainmesh.trainer.loop_context import LoopContext


class LoaderResults:
    """Each loader's metric results (not yet reduced across ranks) or predictions, as the batches
    move from one loader to the next; a loader with no batch gets empty ones. Step outputs are
    kept in ``kept`` (one list per loader) when the module defines ``validation_epoch_end`` /
    ``test_epoch_end``, and only then."""

    def __init__(self, ctx: LoopContext, stage: str, limits: list[int | float], *, keeps_outputs: bool) -> None:
        self._state, self._stage, self.limits, self._keeps = ctx.state, stage, limits, keeps_outputs
        self.results: list[Any] = []
        self.kept: list[list[Any]] = []
        self._current = -1
        self.reached: set[int] = set()  # the loaders that gave a batch
        self._outputs: list[Any] = []

    def reach(self, loader_idx: int) -> None:
        """A batch of loader ``loader_idx``: finish the loaders before it and start it."""
        self.reached.add(loader_idx)
        self._advance_to(loader_idx)

    def _advance_to(self, loader_idx: int) -> None:
        while self._current < loader_idx:
            if self._current >= 0:
                self._finish()
            self._current += 1
            self._state.set_batch_count(self._stage, self.limits[self._current])
            self._state.log_collector.start_stage()
            self._outputs = []

    def add(self, output: Any) -> None:
        # predict keeps what it is told to; 1.x's validation_epoch_end / test_epoch_end get the steps'
        # outputs less the None ones (1.9.5's)
        keep = (
            self._state.predict_loop.keeps_predictions or self._keeps
            if self._stage == "predict"
            else self._keeps and output is not None
        )
        if keep:
            self._outputs.append(output)

    def close(self) -> None:
        if self.limits:
            self._advance_to(len(self.limits) - 1)
            self._finish()

    def _finish(self) -> None:
        if self._stage == "predict":
            self.results.append(self._outputs)
            return
        if self._keeps:
            self.kept.append(self._outputs)
        self.results.append(self._state.log_collector.results)
