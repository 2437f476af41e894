"""DataModule: the data side of a run (download/prepare, split, loaders) in one object."""

from __future__ import annotations

from typing import Any

from trainmesh.data_hooks import DataHooks
from trainmesh.hyperparameters import HyperparametersMixin
from trainmesh.trainer_view import TrainerView


class DataModule(DataHooks, HyperparametersMixin):
    """Groups the data preparation and the loaders a Trainer needs.

    ``prepare_data`` runs once per machine (on local rank 0; on global rank 0 alone with
    ``self.prepare_data_per_node = False``) for work that writes to disk; ``setup(stage)``
    runs in every process, with stage one of "fit", "validate", "test", "predict".
    ``self.save_hyperparameters()`` in ``__init__`` stores its arguments in ``self.hparams``,
    in checkpoints (``datamodule_hyper_parameters``) and in the loggers.
    The batch-transfer hooks (``on_before_batch_transfer``, ``transfer_batch_to_device``,
    ``on_after_batch_transfer``: :class:`trainmesh.data_hooks.DataHooks`) run on every batch.

    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> class Ones(DataModule):
    ...     def setup(self, stage):
    ...         self.ds = TensorDataset(torch.ones(8, 2), torch.zeros(8, dtype=torch.long))
    ...     def train_dataloader(self):
    ...         return DataLoader(self.ds, batch_size=4)
    """

    trainer: TrainerView | None = None

    def setup(self, stage: str) -> None: ...

    def teardown(self, stage: str) -> None: ...

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no train_dataloader()")

    def val_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no val_dataloader()")

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no test_dataloader()")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no predict_dataloader()")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def on_exception(self, exception: BaseException) -> None:
        """Called when fit/validate/test/predict stops with an exception, after the callbacks'
        ``on_exception`` (as in Lightning): clean up what ``setup`` made."""
