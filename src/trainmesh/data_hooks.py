"""The data hooks a Module and a DataModule share, as Lightning's ``DataHooks``: preparing the
data once per machine, and a batch's way to the device.

The Trainer calls ``prepare_data`` (the DataModule's, then the Module's) before ``setup``, and
the three batch hooks on every batch of every loader (training, validation, the sanity check,
test, predict) before the batch hooks and the step see it; where both define one, the
DataModule's runs (Lightning's rule). Where nobody overrides them no batch is walked.
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.utilities.collections import move_data_to_device
from trainmesh.utilities.exceptions import MisconfiguredValue


class DataHooks:
    """Lightning's shared data hooks, with Lightning's defaults.

    >>> class Scaled(DataHooks):
    ...     def on_after_batch_transfer(self, batch, dataloader_idx):
    ...         return batch * 2
    >>> Scaled().on_after_batch_transfer(torch.ones(1), 0)
    tensor([2.])
    """

    # True: prepare_data runs on each machine's local rank 0; False: on global rank 0 alone
    # (data written to a file system every machine shares). Set it in __init__, as in Lightning.
    prepare_data_per_node: bool = True

    def prepare_data(self) -> None:
        """Download or write data, once per machine (see ``prepare_data_per_node``); do not set
        state here: it runs in one process. Split and assign in ``setup(stage)``."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it moves to the device (after the precision's input conversion)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device``; override for a batch type the default does not know. The
        default moves tensors and objects with a ``.to`` method inside lists, tuples, dicts and
        dataclasses (Lightning's ``move_data_to_device``)."""
        return move_data_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the device (augmentation on the accelerator, say)."""
        return batch

    # Lightning's defaults, which raise: a Module or DataModule has the four loader methods, as
    # Lightning's have (``super().train_dataloader()``, a hook recorder built from the base's members).
    # The Trainer takes one of these as "no loaders" (trainmesh.trainer.data_source).
    def train_dataloader(self) -> Any:
        """The training loader(s): a DataLoader, or a list, dict or CombinedLoader of them."""
        raise MisconfiguredValue("`train_dataloader` must be implemented to be used with the Lightning Trainer")

    def val_dataloader(self) -> Any:
        """The validation loader(s); several are told apart by ``dataloader_idx``."""
        raise MisconfiguredValue("`val_dataloader` must be implemented to be used with the Lightning Trainer")

    def test_dataloader(self) -> Any:
        """The test loader(s); several are told apart by ``dataloader_idx``."""
        raise MisconfiguredValue("`test_dataloader` must be implemented to be used with the Lightning Trainer")

    def predict_dataloader(self) -> Any:
        """The prediction loader(s); several are told apart by ``dataloader_idx``."""
        raise MisconfiguredValue("`predict_dataloader` must be implemented to be used with the Lightning Trainer")
