"""Which hyperparameter entries a checkpoint holds, against Lightning 2.6: a module that saved none
gets no ``hyper_parameters`` (nor ``hparams_name``) key, as Lightning writes it (trainmesh wrote
``{}``); one that saved some gets both. Seen in Lightning's DQN example, which saves none."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _entries(L, root):
    found = {}
    for saved in (False, True):

        class Net(L.pl.LightningModule):
            def __init__(self, width: int = 3, save: bool = saved):
                super().__init__()
                if save:
                    self.save_hyperparameters("width")
                self.layer = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).pow(2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / f"ckpt{saved}")
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, callbacks=[checkpoint]))
        trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
        saved_file = torch.load(checkpoint.best_model_path, weights_only=False)
        found[saved] = {k: saved_file[k] for k in ("hyper_parameters", "hparams_name") if k in saved_file}
    return found


def test_hyperparameter_entries_are_lightning_s(tmp_path):
    found = run_both(_entries, tmp_path)
    assert found["lightning"] == {False: {}, True: {"hyper_parameters": {"width": 3}, "hparams_name": "kwargs"}}
    assert found["trainmesh"] == found["lightning"]
