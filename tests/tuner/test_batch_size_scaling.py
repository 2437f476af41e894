"""Tuner.scale_batch_size (tuner/) against Lightning 2.6's, on CPU where no trial runs out of memory
(as Lightning's own tests, with max_trials and steps_per_trial): the same program (the model's
``batch_size`` read by its train_dataloader) gives the same batch size, returned and set on the
model, in power and binsearch mode, with the dataset's length or max_val stopping the doubling;
the weights are the model's before the search."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.tuner import Tuner

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.tuner import Tuner as PlTuner  # noqa: E402


def make_module(base, samples):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.batch_size = 4
            self.layer = nn.Linear(3, 1)

        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            data = TensorDataset(torch.randn(samples, 3, generator=g), torch.randn(samples, 1, generator=g))
            return DataLoader(data, batch_size=self.batch_size)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net


def run(lightning, tmp, samples, **kwargs):
    base, trainer_class, tuner = (
        (pl.LightningModule, pl.Trainer, PlTuner) if lightning else (tm.LightningModule, tm.Trainer, Tuner)
    )
    model = make_module(base, samples)()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = trainer_class(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp),
    )
    found = tuner(trainer).scale_batch_size(model, **kwargs)
    assert all(torch.equal(before[k], model.state_dict()[k]) for k in before)
    return found, model.batch_size


CASES = [
    (64, {"mode": "power", "max_trials": 3, "steps_per_trial": 2}),
    (64, {"mode": "binsearch", "max_trials": 4, "steps_per_trial": 1}),
    (10, {"mode": "power", "steps_per_trial": 1}),  # the dataset's length stops it
    (64, {"mode": "binsearch", "steps_per_trial": 1, "max_val": 16, "margin": 0.1}),
]


@pytest.mark.parametrize(("samples", "kwargs"), CASES)
def test_scale_batch_size_as_lightning(tmp_path, samples, kwargs):
    theirs = run(True, tmp_path / "pl", samples, **kwargs)
    ours = run(False, tmp_path / "tm", samples, **kwargs)
    assert ours == theirs
    assert ours[0] > 2  # the size grew from init_val


def test_loader_passed_in_refused(tmp_path):
    trainer = tm.Trainer(max_epochs=1, accelerator="cpu", logger=False, default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match="cannot change the batch size of a loader passed in"):
        Tuner(trainer).scale_batch_size(make_module(tm.LightningModule, 8)(), train_dataloaders=[])


def test_several_devices_refused_before_any_process_starts(tmp_path):
    # Before the launch the world is this one process: the devices asked for decide.
    trainer = tm.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not supported with distributed strategies"):
        Tuner(trainer).scale_batch_size(make_module(tm.LightningModule, 8)())
