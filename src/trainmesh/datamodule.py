"""DataModule: the data side of a run (download/prepare, split, loaders) in one object."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sized
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
from trainmesh.utilities.model_helpers import _restricted_classmethod


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
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    # Lightning 1.x's argparse face, which 2.0 removed (pytorch-lightning 1.9.5's, utilities/argparse.py):
    # ``MyData.add_argparse_args(parser)``, ``MyData.from_argparse_args(args, **overrides)``.
    add_argparse_args = classmethod(lightning_one_argparse.add_argparse_args)
    from_argparse_args = classmethod(lightning_one_argparse.from_argparse_args)
    parse_argparser = classmethod(lightning_one_argparse.parse_argparser)
    get_init_arguments_and_types = classmethod(lightning_one_argparse.get_init_arguments_and_types)

    def __init__(self) -> None:
        # As Lightning's HyperparametersMixin.__init__: hparams saved before super().__init__() are not logged
        object.__setattr__(self, "_log_hyperparams", False)

    def setup(self, stage: str) -> None: ...

    def teardown(self, stage: str) -> None: ...

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
        the training loaders shuffle, the others keep their order, all pin memory;
        ``datamodule_kwargs`` go to ``cls(...)``, and so do ``batch_size`` and ``num_workers``
        where its ``__init__`` takes them.

        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> data = DataModule.from_datasets(TensorDataset(torch.zeros(4, 1)), batch_size=2)
        >>> len(data.train_dataloader())
        2
        """
        datasets = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        return data_module_from_datasets(
            cls, datasets, batch_size=batch_size, num_workers=num_workers, **datamodule_kwargs
        )

    @_restricted_classmethod  # Lightning's: called on an instance, a TypeError
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

    def __str__(self) -> str:
        """Which loaders the data module gives and their datasets' sizes, as Lightning's prints it:
        ``{Train dataloader: size=8}``, ``{Validation dataloader: 1. size=4 ; 2. size=4}``, ``... None}``
        where the hook fails or is not defined (each hook is called to find out)."""
        lines = []
        for label, hook in _LOADER_HOOKS:
            try:
                info = _loader_sizes(getattr(self, hook)())
            except Exception:  # Lightning's: any failure reads as no loader
                info = None
            if info is None or isinstance(info, str):
                text = "None" if info is None else f"size={info}"
            else:
                text = " ; ".join(f"{i}. size={size}" for i, size in enumerate(info, start=1))
            lines.append(f"{{{label}: {text}}}")
        return os.linesep.join(lines)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def on_exception(self, exception: BaseException) -> None:
        """Called when fit/validate/test/predict stops with an exception, after the callbacks'
        ``on_exception`` (as in Lightning): clean up what ``setup`` made."""


_LOADER_HOOKS = (
    ("Train dataloader", "train_dataloader"),
    ("Validation dataloader", "val_dataloader"),
    ("Test dataloader", "test_dataloader"),
    ("Predict dataloader", "predict_dataloader"),
)


def _loader_sizes(loaders: Any) -> str | list[str] | None:
    """A DataLoader's dataset size ("NA" without a length), or each one's in a collection of them."""
    from torch.utils.data import DataLoader

    def size(loader: DataLoader) -> str:
        dataset = loader.dataset
        return str(len(dataset)) if isinstance(dataset, Sized) else "NA"

    if isinstance(loaders, DataLoader):
        return size(loaders)
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return [size(loader) for loader in loaders if isinstance(loader, DataLoader)]
    return None


def _loaders(datasets: Any, *, batch_size: int, shuffle: bool, num_workers: int) -> Any:
    """A loader for each ``Dataset`` of ``datasets``, kept where it sits in lists, tuples and dicts
    at any depth, what is not a Dataset left as it is (Lightning's ``apply_to_collection``)."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    def each(found: Any) -> Any:
        if isinstance(found, Dataset):
            shuffled = shuffle and not isinstance(found, IterableDataset)
            return DataLoader(found, batch_size=batch_size, shuffle=shuffled, num_workers=num_workers, pin_memory=True)
        if isinstance(found, Mapping):
            dict_type: Any = type(found)  # a dict, an OrderedDict, ... as given
            return dict_type({key: each(value) for key, value in found.items()})
        if isinstance(found, tuple) and hasattr(found, "_fields"):  # a namedtuple
            return type(found)(*(each(value) for value in found))
        if isinstance(found, (list, tuple)):
            return type(found)(each(value) for value in found)
        return found

    return each(datasets)


def data_module_from_datasets(
    cls: type[DataModule],
    datasets: dict[str, Any],
    *,
    batch_size: int,
    num_workers: int,
    **datamodule_kwargs: Any,
) -> DataModule:
    """A data module whose loaders wrap the given datasets (train shuffled, the others not), built
    as Lightning's ``from_datasets`` builds it: ``batch_size`` and ``num_workers`` are passed to
    ``cls`` where its ``__init__`` names them (or takes ``**kwargs``)."""
    # (DataModule's own __init__ takes nothing)
    parameters = {} if cls.__init__ is DataModule.__init__ else inspect.signature(cls.__init__).parameters
    special = {"batch_size": batch_size, "num_workers": num_workers}
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        special = {key: value for key, value in special.items() if key in parameters and key != "self"}
    made = cls(**datamodule_kwargs, **special)
    for stage, dataset in datasets.items():
        if dataset is None:
            continue

        def loader(dataset: Any = dataset, stage: str = stage) -> Any:
            return _loaders(dataset, batch_size=batch_size, shuffle=stage == "train", num_workers=num_workers)

        object.__setattr__(made, f"{stage}_dataloader", loader)
    return made
