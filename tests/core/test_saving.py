"""The hyperparameter files of Lightning's ``core.saving`` under both frameworks:
``load_from_checkpoint(hparams_file=...)`` building the module from a logger's ``hparams.yaml``
(edited after the run) or a ``tags.csv``, a bad extension's error, and the module paths programs
import them from (``core.saving``, ``core.mixins``), as Lightning 2.6's tests_pytorch/models/test_hparams.py
uses them."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _saving(L):
    base = "lightning.pytorch" if L.pl.__name__.startswith("lightning") else "trainmesh"
    return importlib.import_module(f"{base}.core.saving"), importlib.import_module(f"{base}.core.mixins")


def hparams_file_program(L, root):
    """Fit with a CSVLogger, then load the checkpoint with the logger's hparams.yaml changed on
    disk, with a tags.csv, and with a .txt file: what each load built (or raised)."""
    saving, mixins = _saving(L)

    class Model(L.pl.LightningModule):
        def __init__(self, hidden: int = 3, lr: float = 0.1, optim: dict | None = None) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=L.loggers.CSVLogger(root, name="csv")))
    trained = Model(hidden=5, optim={"name": "sgd", "momentum": 0.9})
    trainer.fit(trained, DataLoader(TensorDataset(torch.ones(2, 4))))
    trainer.save_checkpoint(root / "m.ckpt")
    yaml_path = root / "csv" / "version_0" / "hparams.yaml"
    found = {"yaml_text": yaml_path.read_text()}
    hparams = saving.load_hparams_from_yaml(yaml_path)
    found["loaded_type"] = type(hparams).__name__
    hparams["hidden"] = 7
    saving.save_hparams_to_yaml(root / "edited.yaml", hparams)
    found["edited_text"] = (root / "edited.yaml").read_text()
    from_yaml = Model.load_from_checkpoint(root / "m.ckpt", hparams_file=root / "edited.yaml", lr=0.5)
    found["from_yaml"] = {k: str(v) for k, v in from_yaml.hparams.items()}
    saving.save_hparams_to_tags_csv(root / "tags.csv", {"hidden": 9, "lr": 0.01})
    found["tags"] = saving.load_hparams_from_tags_csv(root / "tags.csv")
    found["from_csv"] = dict(Model.load_from_checkpoint(root / "m.ckpt", hparams_file=root / "tags.csv").hparams)
    found["weights_equal"] = torch.equal(from_yaml.layer.weight, trained.layer.weight)
    with pytest.raises(ValueError) as raised:
        Model.load_from_checkpoint(root / "m.ckpt", hparams_file=root / "hparams.txt")
    found["txt_raises"] = type(raised.value).__name__
    with pytest.raises(RuntimeError):  # a folder that does not exist
        saving.save_hparams_to_yaml(root / "missing" / "h.yaml", {"a": 1})
    with pytest.warns(RuntimeWarning):
        found["missing_file"] = saving.load_hparams_from_yaml(root / "none.yaml")

    class Config(mixins.HyperparametersMixin):
        def __init__(self, depth: int = 2, name: str = "x") -> None:
            super().__init__()
            self.save_hyperparameters(ignore="name")

    found["mixin"] = dict(Config(depth=4).hparams)
    return found


def test_load_from_checkpoint_reads_hparams_file_as_lightning(tmp_path):
    """Before: trainmesh refused ``hparams_file`` (ValueError) and had no ``core.saving``/``core.mixins``."""
    found = run_both(hparams_file_program, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs["from_yaml"]["hidden"] == "7" and theirs["from_yaml"]["lr"] == "0.5"
    assert theirs["from_csv"] == {"hidden": 9, "lr": 0.01, "optim": None}
    assert differences(theirs, ours) == []
