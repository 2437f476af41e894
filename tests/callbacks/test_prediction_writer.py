"""BasePredictionWriter (callbacks/prediction_writer.py) against Lightning 2.6's: a writer with each
``write_interval`` on the same predict run (a shuffled loader, so the batch indices are not 0..n;
one loader and two) receives the same calls as Lightning's: each batch's prediction, sample
indices, batch_idx and dataloader_idx, and at the epoch's end the predictions and batch indices; from
``on_predict_end`` on, ``trainer.predict_loop`` holds neither (they are not returned)."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import BasePredictionWriter

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import BasePredictionWriter as PlWriter  # noqa: E402


def make_writer(base):
    class Writer(base):
        def __init__(self, write_interval):
            super().__init__(write_interval)
            self.calls = []

        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            self.calls.append(("batch", prediction.tolist(), list(batch_indices), batch_idx, dataloader_idx))

        def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
            as_lists = torch.utils._pytree.tree_map(lambda t: t.tolist(), predictions)
            self.calls.append(("epoch", as_lists, batch_indices))

        def on_predict_end(self, trainer, pl_module):
            # Lightning drops the batch indices (and the predictions not returned) before this hook
            loop = trainer.predict_loop
            self.calls.append(("end", loop.epoch_batch_indices, len(loop.predictions)))

    return Writer


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def forward(self, x):
            return self.layer(x)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self(batch[0]).squeeze(-1)

    return Net


def loader(n):
    g = torch.Generator().manual_seed(n)
    return DataLoader(TensorDataset(torch.randn(n, 3, generator=g)), batch_size=3, shuffle=True)


def run(lightning, interval, loaders, tmp):
    base, writer_base, trainer_class = (
        (pl.LightningModule, PlWriter, pl.Trainer)
        if lightning
        else (tm.LightningModule, BasePredictionWriter, tm.Trainer)
    )
    pl.seed_everything(4) if lightning else tm.seed_everything(4)
    writer = make_writer(writer_base)(interval)
    trainer = trainer_class(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        default_root_dir=str(tmp),
        callbacks=[writer],
    )
    trainer.predict(make_module(base)(), [loader(n) for n in loaders], return_predictions=False)
    return [*writer.calls, ("after", trainer.predict_loop.epoch_batch_indices, len(trainer.predict_loop.predictions))]


@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
@pytest.mark.parametrize("loaders", [[7], [5, 4]])
def test_writer_called_as_lightning(tmp_path, interval, loaders):
    theirs = run(True, interval, loaders, tmp_path / "pl")
    ours = run(False, interval, loaders, tmp_path / "tm")
    assert theirs and ours == theirs


def test_interval_checked():
    with pytest.raises(ValueError, match="`write_interval` should be one of"):
        BasePredictionWriter("step")
