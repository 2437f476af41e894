"""Tuner.lr_find (tuner/) against Lightning 2.6's: the same program (a shuffled loader, SGD with
momentum and a StepLR, the model's ``lr``) searched with the same seed gives the same learning
rates at each step, the same smoothed losses (within 1e-6), the same suggestion written to the
model's ``lr``, in exponential and linear mode and with an early stop on a diverging loss; the
weights are the model's before the search, and the next fit starts at step 0."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.tuner import Tuner

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.tuner import Tuner as PlTuner  # noqa: E402


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.lr = 0.01
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    return Net


def run(lightning, tmp, **kwargs):
    base, trainer_class, tuner = (
        (pl.LightningModule, pl.Trainer, PlTuner) if lightning else (tm.LightningModule, tm.Trainer, Tuner)
    )
    pl.seed_everything(8) if lightning else tm.seed_everything(8)
    model = make_module(base)()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    trainer = trainer_class(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp),
    )
    loader = DataLoader(data, batch_size=4, shuffle=True)
    finder = tuner(trainer).lr_find(model, loader, min_lr=1e-4, num_training=30, **kwargs)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the search left the weights as they were
    return finder.results, finder.suggestion(), model.lr, trainer, model, loader


CASES = [
    {"max_lr": 1.0},
    {"mode": "linear", "max_lr": 0.5},
    {"max_lr": 1.0, "early_stop_threshold": None},
    {"max_lr": 1000.0},
]


@pytest.mark.parametrize("kwargs", CASES)
def test_lr_find_as_lightning(tmp_path, kwargs):
    theirs = run(True, tmp_path / "pl", **kwargs)
    ours = run(False, tmp_path / "tm", **kwargs)
    assert ours[0]["lr"] == theirs[0]["lr"]
    assert ours[0]["loss"] == pytest.approx(theirs[0]["loss"], abs=1e-6, rel=0, nan_ok=True)
    assert ours[1] == theirs[1] and ours[2] == theirs[2]
    if kwargs.get("early_stop_threshold", 4.0) is None:
        assert len(ours[0]["lr"]) == 30 and ours[1] is not None and ours[2] == ours[1]  # the suggestion in model.lr
    else:
        assert len(ours[0]["lr"]) < 30  # the smoothed loss passed 4 times the best: stopped early, as Lightning


def test_next_fit_starts_afresh(tmp_path):
    _, _, lr, trainer, model, loader = run(False, tmp_path, max_lr=1.0, early_stop_threshold=None)
    trainer.fit(model, loader)
    assert trainer.global_step == 3 * 16 and trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(
        lr * 0.1**3
    )  # StepLR: 3 epoch ends
