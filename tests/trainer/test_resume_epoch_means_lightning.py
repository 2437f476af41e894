"""A fit resumed from a checkpoint saved in the middle of an epoch starts that epoch's running means
(``self.log(..., on_epoch=True)``) empty, as Lightning 2.6's resumed epoch does (it saves none): an
``EarlyStopping`` or ``ModelCheckpoint`` monitoring the epoch mean decides as under Lightning. Before,
a named ``ckpt_path`` of trainmesh's own carried the saved batches' sums into the resumed epoch
(scout-l2 q6: ``train_loss_epoch`` 0.5527 vs Lightning's 0.5318; q7b stopped an epoch earlier)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


def mid_epoch_resume_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            loss = (self.layer(batch[0]) - batch[1]).pow(2).mean()
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    every = L.callbacks.ModelCheckpoint(dirpath=root / "ck", every_n_train_steps=2, save_top_k=-1)
    L.pl.Trainer(max_epochs=1, callbacks=[every], logger=False, **trainer_kwargs(root)).fit(Model(), loader)
    model = Model()
    trainer = L.pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **trainer_kwargs(root))
    trainer.fit(model, loader, ckpt_path=root / "ck" / "epoch=0-step=2.ckpt")
    return {"epoch_mean": float(trainer.callback_metrics["train_loss"]), "step": trainer.global_step}


def test_a_mid_epoch_resume_starts_the_epoch_s_means_empty_as_lightning(tmp_path):
    found = run_both(mid_epoch_resume_program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
