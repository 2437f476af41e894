"""``max_steps`` ending a fit inside an epoch, under Lightning 2.6 and trainmesh: the checkpoint
``Trainer.save_checkpoint`` writes after the fit and ModelCheckpoint's ``last.ckpt`` (saved in the cut
epoch's ``on_train_epoch_end``) hold Lightning's ``epoch``, ``global_step`` and ``loops`` counters
(after the fit: the next epoch, 2; in the hook: 1, with that epoch counted processed), so Lightning's
own ``fit(ckpt_path=)`` resumes from trainmesh's files as from its own."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _model(pl, seen):
    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            seen.append((self.current_epoch, batch_idx, self.global_step))
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model()


def _loader():
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator))
    return DataLoader(data, batch_size=4)


def _saved(name, root):
    L = port(name)
    L.pl.seed_everything(0)
    settings = dict(logger=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_last=True)
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=6, max_epochs=10, callbacks=[checkpoint], **settings))
        trainer.fit(_model(L.pl, []), _loader())
        trainer.save_checkpoint(root / "after.ckpt")
    found = {}
    for file in ("after.ckpt", "ckpt/last.ckpt"):
        saved = torch.load(root / file, weights_only=False)
        found[file] = {"epoch": saved["epoch"], "global_step": saved["global_step"], "loops": saved["loops"]}
    return found


def _resumed_by_lightning(root):
    """What Lightning's own fit trains resuming from each file under ``root``."""
    L = port("lightning")
    found = {}
    for file in ("after.ckpt", "ckpt/last.ckpt"):
        seen: list = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = L.pl.Trainer(
                **trainer_kwargs(root / "resumed", max_steps=10, logger=False, enable_checkpointing=False)
            )
            trainer.fit(_model(L.pl, seen), _loader(), ckpt_path=str(root / file))
        found[file] = (seen, trainer.current_epoch)
    return found


def test_a_fit_max_steps_ended_inside_an_epoch_saves_lightnings_counters(tmp_path):
    theirs, ours = _saved("lightning", tmp_path / "lightning"), _saved("trainmesh", tmp_path / "trainmesh")
    assert theirs["after.ckpt"]["epoch"] == 2 and theirs["ckpt/last.ckpt"]["epoch"] == 1  # the reference
    assert differences(theirs, ours) == []
    assert _resumed_by_lightning(tmp_path / "trainmesh") == _resumed_by_lightning(tmp_path / "lightning")
