"""Lightning 2.x programs of the l-progs21 campaign (docs/how-to/lightning-measured.md), reduced to what
differed: each runs under Lightning 2.6 and under its port (tests/helpers/programs.py), compared as data."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def folds_sharing_one_callbacks_list(L, root):
    """The k-fold pattern of published notebooks: one ``callbacks`` list made before the loop, a Trainer
    per fold given it, fit, then test(ckpt_path="best"). Lightning's Trainer adds its default checkpoint,
    summary (and bar, and max_time's Timer) to that list, so fold 1 takes fold 0's ModelCheckpoint: its
    files go to fold 0's folder, where they replace fold 0's."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    callbacks, seen = [L.pl.callbacks.EarlyStopping(monitor="val_loss")], []
    for fold in range(2):
        model = Model()
        trainer = L.pl.Trainer(
            **trainer_kwargs(root / f"fold{fold}", max_epochs=fold + 1, logger=False, callbacks=callbacks)
        )
        seen.append([type(cb).__name__ for cb in callbacks])
        trainer.fit(model, data, data)
        trainer.test(model, data, ckpt_path="best", verbose=False)
        seen.append(os.path.relpath(trainer.ckpt_path, root))
    timed, empty = [L.pl.callbacks.EarlyStopping(monitor="val_loss")], []
    for given in (timed, empty):
        L.pl.Trainer(
            accelerator="cpu", devices=1, default_root_dir=root / "more", max_time="00:00:01:00", callbacks=given
        )
    seen += [[type(cb).__name__ for cb in listed] for listed in (timed, empty)]
    return outcome(trainer, model, root, seen=seen)


def test_a_trainer_adds_its_callbacks_to_the_list_it_is_given_as_lightning_s(tmp_path):
    """Found by a program reading its callbacks list after Trainer(...) (a VQ-VAE training script), which
    Lightning 2.6.6 had grown by a RichModelSummary; in a k-fold loop, trainmesh wrote fold 1's checkpoint
    under fold1/ and kept fold 0's, where Lightning writes it under fold0/ in place of fold 0's."""
    found = run_both(folds_sharing_one_callbacks_list, tmp_path)
    assert found["lightning"]["extra"]["seen"][3] == "fold0/checkpoints/epoch=1-step=4.ckpt"
    assert differences(found["lightning"], found["trainmesh"]) == []


def checkpoints_the_program_names_on_the_trainer(L, root):
    """Lightning 2.6's ``trainer.ckpt_path = path`` (its setter's docs: "manage which checkpoint is
    loaded statefully"): the runs after it given no ckpt_path load that file, fit resumes it, until the
    program sets None or passes a ckpt_path; and ``trainer.ckpt_path`` after a run that loaded nothing is None."""
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)

    def loss(model):
        return torch.nn.functional.mse_loss(model.layer(x), x.sum(1, keepdim=True)).item()

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(epochs):
        return L.pl.Trainer(**trainer_kwargs(root, max_epochs=epochs, logger=False, enable_model_summary=False))

    model, seen = Model(), []
    first = trainer(1)
    first.fit(model, data)
    first.save_checkpoint(root / "one.ckpt")
    second = trainer(3)
    second.fit(model, data)
    second.ckpt_path = str(root / "one.ckpt")
    for given in (None, None, str(root / "one.ckpt"), None):  # the third forgets the program's path
        seen.append((second.test(model, data, ckpt_path=given, verbose=False), second.ckpt_path and "set"))
    second.predict(model, data, ckpt_path=None)
    seen.append((loss(model), second.ckpt_path))
    resumed, fresh = trainer(3), Model()
    resumed.ckpt_path = str(root / "one.ckpt")
    resumed.fit(fresh, data)
    return outcome(resumed, fresh, root, seen=seen, epochs=(resumed.global_step, resumed.current_epoch))


def test_a_checkpoint_path_the_program_sets_on_the_trainer_is_loaded_as_lightning_s(tmp_path):
    """Found by a program resuming through ``trainer.ckpt_path = ...``: trainmesh kept the path and loaded
    nothing, testing the trained weights (test_loss 0.105 where Lightning 2.6.6 tests the file's, 1.252)
    and fitting afresh; after predict(ckpt_path=None) it still named the checkpoint of the run before."""
    found = run_both(checkpoints_the_program_names_on_the_trainer, tmp_path)
    assert found["lightning"]["extra"]["seen"][0] != found["lightning"]["extra"]["seen"][3]
    assert differences(found["lightning"], found["trainmesh"]) == []
