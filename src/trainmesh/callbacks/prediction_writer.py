"""``BasePredictionWriter``, as Lightning 2.6 defines it (its ``callbacks/prediction_writer.py``):
subclass it and write the predictions where you want them, each batch's at its end
(``write_on_batch_end``, ``write_interval="batch"``), all of them at the predict epoch's end
(``write_on_epoch_end``, ``"epoch"``), or both (``"batch_and_epoch"``). The batch indices are the
dataset indices of each batch's samples (``trainer.predict_loop.current_batch_indices`` /
``epoch_batch_indices``), from a DataLoader's batch sampler.

>>> class Collect(BasePredictionWriter):
...     def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
...         self.predictions = predictions
>>> Collect(write_interval="epoch").interval.on_epoch
True
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.enums import LightningEnum


class WriteInterval(LightningEnum):
    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Write the predictions of ``Trainer.predict``: subclass it and override ``write_on_batch_end``
    and/or ``write_on_epoch_end``, whichever ``write_interval`` calls (the base methods raise
    ``NotImplementedError``). A ``predict_step`` that takes ``dataloader_iter`` is refused at setup.

    Args:
        write_interval: when to write: ``"batch"`` (``write_on_batch_end`` after each predict batch), ``"epoch"`` (``write_on_epoch_end`` with all predictions and batch indices at the predict epoch's end) or ``"batch_and_epoch"`` (both); another value raises ``ValueError`` (default ``'batch'``).

    Examples:
        >>> import os, torch
        >>> class Writer(BasePredictionWriter):
        ...     def __init__(self, output_dir):
        ...         super().__init__(write_interval="epoch")
        ...         self.output_dir = output_dir
        ...     def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        ...         path = os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt")
        ...         torch.save(predictions, path)
        >>> writer = Writer("predictions")
        >>> # Trainer(callbacks=[writer]).predict(model, dataloaders=loader, return_predictions=False)
    """

    def __init__(self, write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "batch") -> None:
        if write_interval not in [interval.value for interval in WriteInterval]:
            raise ValueError(f"`write_interval` should be one of {[i.value for i in WriteInterval]}.")
        self.interval = WriteInterval(write_interval)

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if "dataloader_iter" in inspect.signature(pl_module.predict_step).parameters:
            raise NotImplementedError("The `PredictionWriterCallback` does not support using `dataloader_iter`.")

    def write_on_batch_end(
        self,
        trainer: TrainerView,
        pl_module: Any,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Override with the logic to write a single batch."""
        raise NotImplementedError()

    def write_on_epoch_end(
        self, trainer: TrainerView, pl_module: Any, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Override with the logic to write all batches."""
        raise NotImplementedError()

    def on_predict_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not self.interval.on_batch:
            return
        batch_indices = trainer.predict_loop.current_batch_indices
        self.write_on_batch_end(trainer, pl_module, outputs, batch_indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if not self.interval.on_epoch:
            return
        loop = trainer.predict_loop
        self.write_on_epoch_end(trainer, pl_module, loop.predictions, loop.epoch_batch_indices)
