"""pytorch-lightning 1.9.5's callback names that 2.0 removed: ``ProgressBarBase`` (2.0 renamed it
``ProgressBar``: the base a custom bar subclasses, which draws nothing; 1.9's has the batch counters
2.0 dropped) and ``QuantizationAwareTraining`` (2.0 removed it; refused with the reason).

>>> issubclass(ProgressBarBase, ProgressBar)
True
"""

from __future__ import annotations

from trainmesh.callbacks.progress import ProgressBar
from trainmesh.utilities.refusal import refused_class

__all__ = ["ProgressBarBase", "QuantizationAwareTraining"]


class ProgressBarBase(ProgressBar):
    """1.9.5's base of a custom progress bar: 2.0's ``ProgressBar`` with 1.9's counters a bar reads
    to draw itself (its docs' example prints ``self.train_batch_idx / self.total_train_batches``),
    each read where 1.9.5 reads it (the loops' ``batch_progress.current.processed``)."""

    @property
    def train_batch_idx(self) -> int:
        """The batches processed in this training epoch."""
        return int(self.trainer.fit_loop.epoch_loop.batch_progress.current.processed)

    @property
    def val_batch_idx(self) -> int:
        """The batches processed in this validation run (the fit's, or ``validate``'s)."""
        trainer = self.trainer
        loop = trainer.fit_loop.epoch_loop.val_loop if trainer.state.fn == "fit" else trainer.validate_loop
        return int(loop.batch_progress.current.processed)

    @property
    def test_batch_idx(self) -> int:
        return int(self.trainer.test_loop.batch_progress.current.processed)

    @property
    def predict_batch_idx(self) -> int:
        return int(self.trainer.predict_loop.batch_progress.current.processed)

    @property
    def total_batches_current_epoch(self) -> int | float:
        """This epoch's training batches and the validation batches it runs (each validation run's)."""
        train, val = self.total_train_batches, self.total_val_batches
        trainer = self.trainer
        every = trainer.val_check_batch  # (None before a fit settles it)
        if train != float("inf") and val != float("inf") and every is not None:
            if trainer.check_val_every_n_epoch is None:  # counted across epochs: 1.9.5's arithmetic
                done = trainer.fit_loop.total_batch_idx + 1
                val *= (done + train) // every - done // every
            else:
                val *= train // every
        return train + val


QuantizationAwareTraining = refused_class(
    "QuantizationAwareTraining",
    "Lightning 2.0 removed this callback and trainmesh does not have it (1.9.5's is 347 lines over "
    "torch.ao.quantization's eager mode, which torch deprecates); quantize with torch.ao.quantization "
    "yourself: prepare_qat(model) before fit (in configure_model) and convert(model.eval()) after it",
    module=__name__,
)
