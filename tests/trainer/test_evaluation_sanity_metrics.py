"""What the sanity check shows in the metric dictionaries, as Lightning 2.6 shows it (found by
scout-l2's two-loader EarlyStopping program): with one validation loader its values are in
``callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` at ``on_validation_epoch_end``
and at ``on_sanity_check_end``; with several, none of the loaders' values ever are (Lightning's
epoch-end view skips per-loader values and its ``update_eval_epoch_metrics`` returns ``{}`` while
sanity checking), only what the epoch hooks logged. The validation after it shows every loader's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.differential import metrics_of
from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def sanity_view_program(loaders: int):
    def program(L, root):
        seen = []

        def view(where, trainer):
            seen.append((where, trainer.sanity_checking, *map(metrics_of, _dicts(trainer))))

        class Model(L.pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                return F.mse_loss(self.layer(batch[0]), batch[1])

            def validation_step(self, batch, batch_idx, dataloader_idx=0):
                self.log("v", F.mse_loss(self.layer(batch[0]), batch[1]), prog_bar=True)
                self.log(f"n{dataloader_idx}", 2.0, add_dataloader_idx=False)

            def on_validation_epoch_end(self):
                view("epoch_end", self.trainer)
                self.log("late", 3.0)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        class Watch(L.pl.Callback):
            def on_sanity_check_end(self, trainer, pl_module):
                view("sanity_end", trainer)

        data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
        val = [DataLoader(data, 4) for _ in range(loaders)]
        settings = dict(max_epochs=1, num_sanity_val_steps=1, logger=False, enable_checkpointing=False)
        trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[Watch()], **settings))
        trainer.fit(Model(), DataLoader(data, 4), val if loaders > 1 else val[0])
        return seen

    return program


def _dicts(trainer):
    return trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics


@pytest.mark.parametrize("loaders", [1, 2])
def test_the_sanity_check_shows_the_metrics_lightning_shows(loaders, tmp_path):
    found = run_both(sanity_view_program(loaders), tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    sanity_end = found["trainmesh"][0][2]
    assert ("v" in sanity_end) == (loaders == 1)
