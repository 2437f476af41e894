"""The finiteness check: training stops at the first non-finite loss, the error names the step
where the loss went non-finite, and no checkpoint ever holds weights a non-finite step produced.

On CPU the loss is read every step, before backward (reading it costs nothing there), so a
non-finite step never changes the weights. On an accelerator, reading the loss every step would
make the host wait for the device every step; there the check keeps, on the device, the index
of the first non-finite step and its value (updated with ``torch.where``: no sync), and reads
them (one sync) at the logging cadence, before every checkpoint is built, before validation
and at the end of the epoch. The steps that ran between the bad one and the read did change
the weights in memory, but no checkpoint holds them: the error says how many ran.

A ``SpikeDetection(finite_only=True)`` among the callbacks handles a non-finite loss itself, as in
Lightning (which has no check of its own): the step runs, and the callback's ``on_train_batch_end``
writes the batches to skip and raises ``TrainingSpikeException``. The check is then deferred on
CPU too, the backstop for a loss the callback lets pass (inside its ``warmup``).
"""

from __future__ import annotations

import math
import os

import torch

from trainmesh.trainer_view import TrainerView


class FiniteLossCheck:
    """One per fit. ``check`` runs on every step's loss; ``verify`` reads what was deferred."""

    def __init__(self, trainer: TrainerView, *, deferred: bool) -> None:
        self.trainer = trainer
        self.deferred = deferred
        # Deferred: (global step, epoch, batch) of each step checked since the last clean verify;
        # on the device, the index in it of the first non-finite loss (-1: none) and that loss.
        self._positions: list[tuple[int, int, int]] = []
        self._first_bad: torch.Tensor | None = None
        self._bad_value: torch.Tensor | None = None
        # Checkpoints this fit began to write after a clean check, the latest last: the error
        # names the latest of them that is on disk (a callback records a path before writing it).
        self._checked_saves: list[str] = []
        self.batch_idx = 0  # the batch whose loss the next ``check`` reads (the loop sets it), for the error

    @classmethod
    def for_device(cls, trainer: TrainerView, device: torch.device) -> FiniteLossCheck:
        return cls(trainer, deferred=device.type != "cpu" or _spike_detection_watches(trainer))

    def check(self, loss: torch.Tensor) -> None:
        """The step's loss (of batch ``self.batch_idx``), before it changes the weights (see the
        module's docstring). The strategy calls it directly: one call on every step."""
        batch_idx = self.batch_idx
        if not self.deferred:
            value = loss.item()  # no detach needed: item() records nothing for autograd
            if not math.isfinite(value):
                raise FloatingPointError(
                    self._message(value, (self.trainer.global_step, self.trainer.current_epoch, batch_idx), None)
                )
            return
        loss = loss.detach()
        if self._first_bad is None or self._first_bad.device != loss.device:
            self.verify()  # a first step, or the loss moved device: settle what was recorded
            self._first_bad = torch.full((), -1, dtype=torch.int64, device=loss.device)
            self._bad_value = torch.zeros((), dtype=torch.float32, device=loss.device)
        index = len(self._positions)
        self._positions.append((self.trainer.global_step, self.trainer.current_epoch, batch_idx))
        newly_bad = torch.logical_and(torch.isfinite(loss).logical_not(), self._first_bad < 0)
        self._first_bad = torch.where(newly_bad, index, self._first_bad)
        assert self._bad_value is not None  # set with _first_bad
        self._bad_value = torch.where(newly_bad, loss.float(), self._bad_value)

    def verify(self) -> None:
        """Raise FloatingPointError if a step checked since the last call had a non-finite loss.
        One device-to-host read when steps were recorded; nothing otherwise."""
        if not self._positions:
            return
        assert self._first_bad is not None and self._bad_value is not None
        index, value = torch.stack([self._first_bad.double(), self._bad_value.double()]).tolist()
        if index < 0:
            self._positions.clear()  # the index stays -1: the next steps count from 0 again
            return
        # The record is kept: a checkpoint attempted after this error (an exception callback)
        # is refused too.
        bad = int(index)
        raise FloatingPointError(self._message(value, self._positions[bad], len(self._positions) - 1 - bad))

    def before_save(self, path: str) -> None:
        """Before a checkpoint is built: raise if a step since the last read went non-finite."""
        self.verify()
        self._checked_saves.append(path)

    def _last_good_checkpoint(self) -> str:
        callback = self.trainer.checkpoint_callback
        # A resumed fit's callback knows the checkpoints of the run before.
        known: list[str] = (
            [getattr(callback, "best_model_path", ""), getattr(callback, "last_model_path", "")] if callback else []
        )
        for path in reversed(known + self._checked_saves):
            if path and os.path.exists(path):
                return path
        return ""

    def _message(self, value: float, position: tuple[int, int, int], ran_after: int | None) -> str:
        global_step, epoch, batch_idx = position
        last = self._last_good_checkpoint()
        where = f"the last good checkpoint is {last}" if last else "no checkpoint had been written yet"
        if ran_after is None:
            what_ran = "training stopped before this step changed the weights"
        else:
            what_ran = (
                f"the loss is read from the device only at the logging cadence and before checkpoints and "
                f"validation, so {ran_after} more batch{'es' if ran_after != 1 else ''} ran after it: the weights "
                "in memory hold their updates (and this step's), no checkpoint does"
            )
        return (
            f"the training loss is {value} at global step {global_step} (epoch {epoch}, batch {batch_idx}); "
            f"{what_ran}, and {where}. Lower the learning rate, clip gradients (gradient_clip_val=1.0) or "
            "check the data for NaN/inf"
        )


def verify_finite_losses(check: FiniteLossCheck | None, path: str) -> None:
    """Before the checkpoint ``path`` is built: refuse it if a deferred check holds a
    non-finite step (outside fit there is no check: None)."""
    if check is not None:
        check.before_save(path)


def verify_deferred_losses(check: FiniteLossCheck | None) -> None:
    """The fit loop's read of the deferred check: at the logging cadence, before validation and at
    an epoch's end (``FiniteLossCheck.verify``)."""
    assert check is not None  # fit sets it
    check.verify()


def _spike_detection_watches(trainer: TrainerView) -> bool:
    """A SpikeDetection that takes a non-finite loss for a spike (its default) is among the callbacks."""
    from trainmesh.callbacks.spike import SpikeDetection

    return any(isinstance(each, SpikeDetection) and each.finite_only for each in trainer.callbacks)
