"""``save_hyperparameters()`` in a dataclass module's ``__post_init__`` (Lightning's
tests_pytorch/models/test_hparams.py::test_dataclass_lightning_module): the init fields are the
hyperparameters (an ``init=False`` field is not), ``ignore`` applies, and the checkpoint rebuilds the
module. The same under Lightning 2.6 and trainmesh."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def dataclass_program(L, root):
    @dataclasses.dataclass(eq=False)  # eq=False keeps nn.Module's hash
    class Model(L.pl.LightningModule):
        width: int
        name: str = "plain"
        ignore_me: bool = False
        derived: int = dataclasses.field(init=False, default=0)

        def __post_init__(self):
            super().__init__()
            self.save_hyperparameters(ignore=("ignore_me",))
            self.layer = torch.nn.Linear(4, self.width)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model(3, name="wide")
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
    trainer.fit(model, DataLoader(TensorDataset(torch.ones(2, 4))))
    trainer.save_checkpoint(root / "m.ckpt")
    loaded = Model.load_from_checkpoint(root / "m.ckpt")
    checkpoint = torch.load(root / "m.ckpt", weights_only=False)
    return {
        "hparams": dict(model.hparams),
        "saved": dict(checkpoint["hyper_parameters"]),
        "hparams_name": checkpoint.get("hparams_name"),
        "loaded": (loaded.width, loaded.name),
    }


def test_dataclass_module_hyperparameters_as_lightning(tmp_path):
    """Before: trainmesh found no __init__ arguments from __post_init__ (hparams empty, load failed)."""
    found = run_both(dataclass_program, tmp_path)
    assert found["lightning"]["hparams"] == {"width": 3, "name": "wide"}
    assert differences(found["lightning"], found["trainmesh"]) == []
