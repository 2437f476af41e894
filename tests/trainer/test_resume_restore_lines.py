"""Lightning 2.6's lines around a checkpoint a stage loads: ``Restoring states from the checkpoint path
at ...`` before it is read, ``Restored all states from the checkpoint at ...`` once a fit resumed from
it, ``Loaded model weights from the checkpoint at ...`` for test; and ModelCheckpoint's warning, in
Lightning's words, when the resumed fit saves to another folder. Compared with Lightning's own run."""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _lines(framework, folder, caplog) -> list[str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def test_step(self, batch, batch_idx):
            self.log("loss", self.layer(batch[0]).pow(2).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(max_epochs, dirpath):
        return framework.Trainer(
            max_epochs=max_epochs,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[framework.callbacks.ModelCheckpoint(dirpath=dirpath)],
        )

    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    os.chdir(folder)
    trainer(1, "first").fit(Model(), loader)
    caplog.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = trainer(2, "second")
        second.fit(Model(), loader, ckpt_path="first/epoch=0-step=2.ckpt")
        second.test(Model(), loader, ckpt_path="first/epoch=0-step=2.ckpt", verbose=False)
    said = [r.getMessage().replace(str(folder), "DIR") for r in caplog.records if "checkpoint" in r.getMessage()]
    warned = [str(w.message).replace(str(folder), "DIR") for w in caught if "dirpath" in str(w.message)]
    return said + warned


def test_resume_and_test_from_a_checkpoint_say_what_lightning_says(tmp_path, caplog, monkeypatch) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    (tmp_path / "lightning").mkdir()
    (tmp_path / "trainmesh").mkdir()
    expected = _lines(lightning, tmp_path / "lightning", caplog)
    assert expected[:2] == [
        "Restoring states from the checkpoint path at first/epoch=0-step=2.ckpt",
        "Restored all states from the checkpoint at first/epoch=0-step=2.ckpt",
    ]
    assert "Loaded model weights from the checkpoint at first/epoch=0-step=2.ckpt" in expected
    assert any("dirpath has changed" in line for line in expected)
    assert _lines(trainmesh, tmp_path / "trainmesh", caplog) == expected


def _missing(framework, folder, caplog, stage: str) -> tuple[list[str], type, str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("loss", self.layer(batch[0]).pow(2).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_epochs=1, default_root_dir=folder, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    caplog.clear()
    with pytest.raises(Exception) as raised:
        getattr(trainer, stage)(Model(), loader, ckpt_path=str(folder / "nope.ckpt"))
    said = [r.getMessage().replace(str(folder), "DIR") for r in caplog.records if "checkpoint" in r.getMessage()]
    return said, type(raised.value), str(raised.value).replace(str(folder), "DIR")


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_a_missing_checkpoint_file_says_and_raises_what_lightning_does(tmp_path, caplog, stage) -> None:
    """Lightning's "Restoring states ..." line comes before its checkpoint IO's FileNotFoundError."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    caplog.set_level(logging.INFO)
    (tmp_path / "lightning").mkdir()
    (tmp_path / "trainmesh").mkdir()
    expected = _missing(lightning, tmp_path / "lightning", caplog, stage)
    assert expected == (
        ["Restoring states from the checkpoint path at DIR/nope.ckpt"],
        FileNotFoundError,
        "Checkpoint file not found: DIR/nope.ckpt",
    )
    assert _missing(trainmesh, tmp_path / "trainmesh", caplog, stage) == expected
