"""Where each stage's loaders come from, under Lightning 2.6 and under trainmesh: a loader given as
an argument, a DataModule's method, the Module's, both or neither, a DataModule method raising
NotImplementedError, loaders beside ``datamodule=``, a second DataModule after fit, and
``LightningDataModule.from_datasets`` (lists and dicts of datasets too), a loader method returning
None or set to None, a Module's loader method raising NotImplementedError. Each case records the batches read (each loader holds its
own value), the warnings, the error (Lightning's exception class or not, the builtin class, the
words) and ``trainer.datamodule``.

Lightning takes loaders only from the DataModule where one is given (``attach_datamodule``):
before, trainmesh fell back to the Module's ``val_dataloader``, so validation ran and ``val_loss``
was monitored where Lightning skips the val loop. A loader method returning None trained on
nothing (train) or skipped the stage where Lightning 2.6 raises its TypeError; a Module's
NotImplementedError was taken for "no loader" (Lightning lets it out); ``from_datasets`` with a
dict holding a list of datasets failed in collate.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _framework(name: str) -> Any:
    if name == "lightning":
        import lightning.pytorch as pl

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        return pl
    import trainmesh as pl

    return pl


def _loader(value: float) -> DataLoader:
    return DataLoader([torch.full((2,), value)] * 2, batch_size=1)


def _loaders(value: Any) -> Any:
    """A loader for a number, a list of them for a list (None kept)."""
    if isinstance(value, list):
        return [None if each is None else _loader(each) for each in value]
    return _loader(value)


def _classes(pl: Any) -> dict[str, Any]:
    class Net(pl.LightningModule):
        def __init__(self, own: tuple[str, ...] = ()) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.own = own

        def _read(self, stage: str, batch: torch.Tensor) -> torch.Tensor:
            while isinstance(batch, (list, tuple, dict)):  # a TensorDataset's, several loaders'
                batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
            self.trainer.reads.append((stage, float(batch[0, 0])))
            return self.layer(batch).sum()

        def training_step(self, batch, batch_idx):
            return self._read("train", batch)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self._read("val", batch))

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("test_loss", self._read("test", batch))

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self._read("predict", batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    # The Module's loaders read 1.0, the DataModule's 10.0, the arguments' 100.0 (+ a kind's offset).
    class NetWithLoaders(Net):
        def train_dataloader(self):
            return _loader(1.0)

        def val_dataloader(self):
            return _loader(2.0)

        def test_dataloader(self):
            return _loader(3.0)

        def predict_dataloader(self):
            return _loader(4.0)

    class TrainData(pl.LightningDataModule):
        def train_dataloader(self):
            return _loader(10.0)

    class AllData(TrainData):
        def val_dataloader(self):
            return _loader(20.0)

        def test_dataloader(self):
            return _loader(30.0)

        def predict_dataloader(self):
            return _loader(40.0)

    class RaisingData(TrainData):
        def val_dataloader(self):
            raise NotImplementedError("no validation data")

        def test_dataloader(self):
            raise NotImplementedError("no test data")

    class NetReturningNone(Net):  # its evaluation loaders "switched off" by returning None
        def train_dataloader(self):
            return _loader(1.0)

        def val_dataloader(self):
            return None

        def test_dataloader(self):
            return None

    class NetTrainNone(NetWithLoaders):
        def train_dataloader(self):
            return None

    class NetRaising(NetWithLoaders):
        def val_dataloader(self):
            raise NotImplementedError("no validation data")

        def test_dataloader(self):
            raise NotImplementedError("no test data")

    class NoneData(TrainData):
        def val_dataloader(self):
            return None

        def predict_dataloader(self):
            return None

    class NoneTrainData(AllData):
        def train_dataloader(self):
            return None

    return {
        "Net": Net,
        "NetReturningNone": NetReturningNone,
        "NetTrainNone": NetTrainNone,
        "NetRaising": NetRaising,
        "NoneData": NoneData,
        "NoneTrainData": NoneTrainData,
        "NetWithLoaders": NetWithLoaders,
        "TrainData": TrainData,
        "AllData": AllData,
        "RaisingData": RaisingData,
        "from_datasets": lambda: pl.LightningDataModule.from_datasets(
            train_dataset=TensorDataset(torch.full((2, 2), 50.0)),
            val_dataset=TensorDataset(torch.full((2, 2), 60.0)),
            batch_size=1,
        ),
        "from_datasets_lists": lambda: pl.LightningDataModule.from_datasets(
            train_dataset=[TensorDataset(torch.full((2, 2), 50.0)), TensorDataset(torch.full((4, 2), 51.0))],
            val_dataset=[TensorDataset(torch.full((2, 2), 60.0)), TensorDataset(torch.full((2, 2), 61.0))],
            test_dataset={"a": TensorDataset(torch.full((1, 2), 70.0)), "b": [TensorDataset(torch.full((1, 2), 71.0))]},
            batch_size=1,
        ),
    }


# case: (stage, module class, datamodule, extra arguments)
CASES = {
    "fit-dm-without-val-module-with": ("fit", "NetWithLoaders", "TrainData", {}),
    "fit-dm-with-val-module-with": ("fit", "NetWithLoaders", "AllData", {}),
    "fit-dm-only": ("fit", "Net", "AllData", {}),
    "fit-module-only": ("fit", "NetWithLoaders", None, {}),
    "fit-neither": ("fit", "Net", None, {}),
    "fit-dm-raising-val": ("fit", "NetWithLoaders", "RaisingData", {}),
    "fit-train-argument-and-dm": ("fit", "Net", "AllData", {"train_dataloaders": 100.0}),
    "fit-val-argument-and-dm": ("fit", "Net", "AllData", {"val_dataloaders": 200.0}),
    "fit-arguments": ("fit", "NetWithLoaders", None, {"train_dataloaders": 100.0, "val_dataloaders": 200.0}),
    "fit-from-datasets": ("fit", "NetWithLoaders", "from_datasets", {}),
    "fit-from-dataset-lists": ("fit", "Net", "from_datasets_lists", {}),
    "test-from-datasets-nested": ("test", "Net", "from_datasets_lists", {}),
    "fit-dm-train-returns-none": ("fit", "Net", "NoneTrainData", {}),
    "fit-dm-val-returns-none": ("fit", "Net", "NoneData", {}),
    "predict-dm-returns-none": ("predict", "Net", "NoneData", {}),
    "fit-module-train-returns-none": ("fit", "NetTrainNone", None, {}),
    "fit-module-val-returns-none": ("fit", "NetReturningNone", None, {}),
    "test-module-returns-none": ("test", "NetReturningNone", None, {}),
    "fit-val-list-holding-none": ("fit", "NetWithLoaders", None, {"val_dataloaders": [200.0, None]}),
    "fit-module-raising-val": ("fit", "NetRaising", None, {}),
    "test-module-raising": ("test", "NetRaising", None, {}),
    "fit-module-loaders-set-to-none": ("fit", "NetWithLoaders", None, {"set_to_none": True}),
    "validate-module-loaders-set-to-none": ("validate", "NetWithLoaders", None, {"set_to_none": True}),
    "validate-dm-without-module-with": ("validate", "NetWithLoaders", "TrainData", {}),
    "validate-dm-raising": ("validate", "NetWithLoaders", "RaisingData", {}),
    "validate-dm-with": ("validate", "NetWithLoaders", "AllData", {}),
    "validate-module-only": ("validate", "NetWithLoaders", None, {}),
    "validate-neither": ("validate", "Net", None, {}),
    "validate-argument": ("validate", "NetWithLoaders", None, {"dataloaders": 200.0}),
    "validate-argument-and-dm": ("validate", "Net", "AllData", {"dataloaders": 200.0}),
    "test-dm-without-module-with": ("test", "NetWithLoaders", "TrainData", {}),
    "test-dm-raising": ("test", "NetWithLoaders", "RaisingData", {}),
    "test-dm-with": ("test", "NetWithLoaders", "AllData", {}),
    "test-module-only": ("test", "NetWithLoaders", None, {}),
    "predict-dm-without-module-with": ("predict", "NetWithLoaders", "TrainData", {}),
    "predict-dm-with": ("predict", "NetWithLoaders", "AllData", {}),
    "predict-module-only": ("predict", "NetWithLoaders", None, {}),
    "predict-argument": ("predict", "Net", None, {"dataloaders": 400.0}),
    "after-fit-validate-other-dm": ("fit+validate", "NetWithLoaders", "AllData", {}),
    "after-fit-validate-no-dm": ("fit+validate-none", "NetWithLoaders", "AllData", {}),
}


def _error(pl: Any, error: BaseException) -> tuple[bool, str, str]:
    misconfigured = pl.__name__.startswith("lightning")
    if misconfigured:
        from lightning.pytorch.utilities.exceptions import MisconfigurationException
    else:
        from trainmesh.utilities.exceptions import MisconfigurationException
    if isinstance(error, MisconfigurationException):  # trainmesh's is a ValueError too
        return True, "", str(error)
    return False, type(error).__name__, str(error)


def _record(name: str, case: str) -> dict[str, Any]:
    pl = _framework(name)
    classes = _classes(pl)
    stage, net_name, dm_name, extra = CASES[case]
    model = classes[net_name]()
    datamodule = classes[dm_name]() if dm_name else None
    if extra.get("set_to_none"):  # Lightning's tests' way of taking a loader method away
        for kind in ("train", "val", "test", "predict"):
            setattr(model, f"{kind}_dataloader", None)
    kwargs = {k: _loaders(v) for k, v in extra.items() if k != "set_to_none"}
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        limit_test_batches=1,
        limit_predict_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.reads = []
    record: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if stage.startswith("fit"):
                trainer.fit(model, datamodule=datamodule, **kwargs)
            if stage == "fit+validate":
                datamodule = classes["from_datasets"]()  # the one trainer.datamodule is then
                trainer.validate(model, datamodule=datamodule, verbose=False)
            elif stage == "fit+validate-none":
                trainer.validate(model, verbose=False)
            elif stage in ("validate", "test"):
                getattr(trainer, stage)(model, datamodule=datamodule, verbose=False, **kwargs)
            elif stage == "predict":
                trainer.predict(model, datamodule=datamodule, **kwargs)
        except Exception as error:  # the record compares it
            record["error"] = _error(pl, error)
    record["reads"] = trainer.reads
    record["metrics"] = sorted(trainer.callback_metrics)
    record["datamodule is the last given"] = trainer.datamodule is datamodule
    record["warnings"] = sorted(
        str(w.message) for w in caught if "loader" in str(w.message) or "Skipping" in str(w.message)
    )
    return record


@pytest.mark.parametrize("case", list(CASES))
def test_loaders_come_from_where_lightning_takes_them(case):
    assert _record("trainmesh", case) == _record("lightning", case)
