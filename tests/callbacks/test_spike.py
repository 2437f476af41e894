"""SpikeDetection (callbacks/spike.py) against Lightning 2.6's: the same program whose data has an
outlier batch stops at the same batch with the same message, writes the same batches to skip, and
leaves bit-identical weights; with a high ``atol`` neither stops, and the state is the same. A NaN
loss is the callback's to handle, as in Lightning: the step runs, then TrainingSpikeException (not
trainmesh's own finite-loss FloatingPointError) with the same batches to skip and callbacks told."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import SpikeDetection
from trainmesh.callbacks.spike import TrainingSpikeException

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import SpikeDetection as PlSpikeDetection  # noqa: E402


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Net


def run(lightning, tmp, nan_batch=None, **kwargs):
    base, trainer_class, detector = (
        (pl.LightningModule, pl.Trainer, PlSpikeDetection)
        if lightning
        else (tm.LightningModule, tm.Trainer, SpikeDetection)
    )
    pl.seed_everything(1) if lightning else tm.seed_everything(1)
    model = make_module(base)()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, generator=g), torch.randn(40, 1, generator=g)
    y[28:32] *= 50  # batch 7 is an outlier
    if nan_batch is not None:
        x[nan_batch * 4] = float("nan")
    spike = detector(window=4, warmup=2, **kwargs)
    trainer = trainer_class(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp),
        callbacks=[spike],
    )
    error = None
    try:
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    except RuntimeError as caught:
        error = caught
    path = tmp / "skip_batches.json"
    skipped = json.loads(path.read_text()) if path.exists() else None
    state = {k: v for k, v in spike.state_dict().items() if k not in ("running", "mean", "window", "bad_batches_path")}
    return model.state_dict(), error, skipped, state


@pytest.mark.parametrize("atol", [None, 1e6])
def test_spike_detected_as_lightning(tmp_path, atol):
    theirs = run(True, tmp_path / "pl", atol=atol)
    ours = run(False, tmp_path / "tm", atol=atol)
    assert str(ours[1]) == str(theirs[1])
    assert ours[2] == theirs[2]
    assert ours[3] == theirs[3]  # last_val: the same float32 loss
    if atol is None:
        assert isinstance(ours[1], TrainingSpikeException) and ours[2] == [6, 7]
    else:
        assert ours[1] is None
    for name in theirs[0]:
        assert torch.equal(ours[0][name], theirs[0][name]), name


def test_a_nan_loss_stops_as_lightning_s_spike(tmp_path):
    """The NaN loss at batch 5 (before the outlier): Lightning trains that step (the weights go
    NaN), then the callback raises in on_train_batch_end; trainmesh's finite-loss check, which
    would stop before the step with FloatingPointError, leaves it to the callback."""
    theirs = run(True, tmp_path / "pl", nan_batch=5, atol=1e6)
    ours = run(False, tmp_path / "tm", nan_batch=5, atol=1e6)
    assert type(ours[1]).__name__ == type(theirs[1]).__name__ == "TrainingSpikeException"
    assert str(ours[1]) == str(theirs[1]) == "Training spike detected in batch 5"
    assert ours[2] == theirs[2] == [4, 5]
    assert ours[3] == theirs[3]
    for name in theirs[0]:
        assert torch.equal(ours[0][name].isnan(), theirs[0][name].isnan()), name
        assert torch.equal(ours[0][name].nan_to_num(), theirs[0][name].nan_to_num()), name
