"""Lightning 2.6's "Checkpoint directory X exists and is not empty." as a fit sets its checkpoint
folder up (mnist-hello-world fits its Trainer a second time, which Lightning warns of and trainmesh
did not)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _program(pl, root):
    """The folder warnings of: a fit, a second fit of the same Trainer, a test, a new Trainer
    saving into the first's folder (dirpath given) and one whose callback keeps nothing."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.l1(batch[0]), batch[1])

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.cross_entropy(self.l1(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)
    kwargs = dict(accelerator="cpu", devices=1, default_root_dir=root, enable_progress_bar=False)
    kwargs.update(enable_model_summary=False, logger=False, max_epochs=1)
    said = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def mark(name):
            said[name] = [
                str(w.message).replace(str(root), "ROOT")
                for w in caught
                if "checkpoint directory" in str(w.message).lower()
            ]
            caught.clear()

        trainer = pl.Trainer(**kwargs)
        trainer.fit(Model(), loader)
        mark("first fit")
        trainer.fit(Model(), loader)
        mark("second fit")
        trainer.test(Model(), loader)
        mark("test")
        folder = root / "checkpoints"
        pl.Trainer(callbacks=[pl.callbacks.ModelCheckpoint(dirpath=folder)], **kwargs).fit(Model(), loader)
        mark("dirpath given")
        keeps_none = pl.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=0)
        pl.Trainer(callbacks=[keeps_none], **kwargs).fit(Model(), loader)
        mark("save_top_k=0")
    return said


def test_a_fit_into_a_folder_with_files_is_warned_of_as_lightning(tmp_path):
    import lightning.pytorch as lightning

    import trainmesh

    expected = _program(lightning, tmp_path / "lightning")
    warned = ["Checkpoint directory ROOT/checkpoints exists and is not empty."]
    assert expected == {"first fit": [], "second fit": warned, "test": [], "dirpath given": warned, "save_top_k=0": []}
    assert _program(trainmesh, tmp_path / "trainmesh") == expected
