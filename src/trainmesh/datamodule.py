"""DataModule: the data side of a run (download/prepare, split, loaders) in one object."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from trainmesh.data_hooks import DataHooks
from trainmesh.hyperparameters import (
    HyperparametersMixin,
    constructor_arguments,
    datamodule_state,
    read_saved_checkpoint,
)
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities import argparse as lightning_one_argparse


class DataModule(DataHooks, HyperparametersMixin):
    """Groups the data preparation and the loaders a Trainer needs.

    ``prepare_data`` runs once per machine (on local rank 0; on global rank 0 alone with
    ``self.prepare_data_per_node = False``) for work that writes to disk; ``setup(stage)``
    runs in every process, with stage one of "fit", "validate", "test", "predict".
    ``self.save_hyperparameters()`` in ``__init__`` stores its arguments in ``self.hparams``,
    in checkpoints (``datamodule_hyper_parameters``) and in the loggers.
    The batch-transfer hooks (``on_before_batch_transfer``, ``transfer_batch_to_device``,
    ``on_after_batch_transfer``: :class:`trainmesh.data_hooks.DataHooks`) run on every batch.

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> class Ones(DataModule):
        ...     def setup(self, stage):
        ...         self.ds = TensorDataset(torch.ones(8, 2), torch.zeros(8, dtype=torch.long))
        ...     def train_dataloader(self):
        ...         return DataLoader(self.ds, batch_size=4)
    """

    trainer: TrainerView | None = None
    # Lightning's: the data module's name for loggers (None: the class name is not used).
    name: str | None = None
    # A data module's hyperparameters live under their own key, beside the module's.
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"

    # Lightning 1.x's argparse face, which 2.0 removed (pytorch-lightning 1.9.5's, utilities/argparse.py):
    # ``MyData.add_argparse_args(parser)``, ``MyData.from_argparse_args(args, **overrides)``.
    add_argparse_args = classmethod(lightning_one_argparse.add_argparse_args)
    from_argparse_args = classmethod(lightning_one_argparse.from_argparse_args)
    parse_argparser = classmethod(lightning_one_argparse.parse_argparser)
    get_init_arguments_and_types = classmethod(lightning_one_argparse.get_init_arguments_and_types)

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

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A data module from datasets (each one, a list or a dict of them), as Lightning builds it:
        the training loaders shuffle, the others keep their order.

        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> data = DataModule.from_datasets(TensorDataset(torch.zeros(4, 1)), batch_size=2)
        >>> len(data.train_dataloader())
        2
        """
        if datamodule_kwargs:
            raise TypeError(
                f"DataModule.from_datasets builds a plain DataModule; it takes no {sorted(datamodule_kwargs)}: "
                "subclass DataModule to give it constructor arguments"
            )
        datasets = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        return data_module_from_datasets(cls, datasets, batch_size=batch_size, num_workers=num_workers)

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str,
        map_location: Any = "cpu",
        hparams_file: str | os.PathLike | None = None,
        weights_only: bool | None = None,
        **overrides: Any,
    ) -> DataModule:
        """The data module built from the hyperparameters a checkpoint saved for it, with
        ``overrides`` replacing some, as Lightning's ``LightningDataModule.load_from_checkpoint``
        (``weights_only`` goes to ``torch.load``: None is torch's default)."""
        checkpoint = read_saved_checkpoint(
            checkpoint_path, map_location, hparams_file, weights_only, hparams_key=cls.CHECKPOINT_HYPER_PARAMS_KEY
        )
        made = cls(**constructor_arguments(cls, checkpoint, overrides))
        held = datamodule_state(made, checkpoint)  # the state its state_dict() returned when saved
        if held:
            made.load_state_dict(held)
        return made

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def on_exception(self, exception: BaseException) -> None:
        """Called when fit/validate/test/predict stops with an exception, after the callbacks'
        ``on_exception`` (as in Lightning): clean up what ``setup`` made."""


def _loaders(datasets: Any, *, batch_size: int, shuffle: bool, num_workers: int) -> Any:
    from torch.utils.data import DataLoader, IterableDataset

    def one(dataset: Any) -> Any:
        shuffled = shuffle and not isinstance(dataset, IterableDataset)
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffled, num_workers=num_workers)

    if isinstance(datasets, Mapping):
        return {key: one(ds) for key, ds in datasets.items()}
    if isinstance(datasets, (list, tuple)):
        return [one(ds) for ds in datasets]
    return one(datasets)


def data_module_from_datasets(
    cls: type[DataModule],
    datasets: dict[str, Any],
    *,
    batch_size: int,
    num_workers: int,
) -> DataModule:
    """A data module whose loaders wrap the given datasets (train shuffled, the others not)."""
    made = cls()
    for stage, dataset in datasets.items():
        if dataset is None:
            continue

        def loader(dataset: Any = dataset, stage: str = stage) -> Any:
            return _loaders(dataset, batch_size=batch_size, shuffle=stage == "train", num_workers=num_workers)

        object.__setattr__(made, f"{stage}_dataloader", loader)
    return made
