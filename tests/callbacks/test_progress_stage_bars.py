"""What a program reads of Lightning 2.6's bars, under Lightning and under its port: each stage's
``*_progress_bar`` (tqdm's ``n``/``total``, rich's ``completed``/``total``) read from a callback at
each batch's end and after each run, with ``refresh_rate=2``, two validation loaders and a predict
loader without a length, after a sanity check; and the error before a run (tqdm's TypeError, rich's
AssertionError). (The descriptions differ: Lightning's "Validation DataLoader 0: ", trainmesh's "Validation".)"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("rich")


def _count(bar):
    return getattr(bar, "n", None) if hasattr(bar, "n") else bar.completed


def _read(callback, stage):
    try:
        bar = getattr(callback, "val_sanity_check_bar" if stage == "val_sanity" else f"{stage}_progress_bar")
    except (TypeError, AssertionError, AttributeError) as error:
        return type(error).__name__
    return (bar.total, _count(bar))


def bars_read_by_a_callback(L, root, kind):
    seen = []

    class Steps(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            pass

        test_step = validation_step

        def predict_step(self, batch, batch_idx):
            return batch

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Reader(L.pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            seen.append(("train", _read(trainer.progress_bar_callback, "train")))

        def on_validation_batch_end(self, trainer, *args):
            bar = trainer.progress_bar_callback  # the sanity check's batch too: rich counts it apart
            seen.append(("val", _read(bar, "val"), _read(bar, "train"), _read(bar, "val_sanity")))

        def on_test_batch_end(self, trainer, *args):
            seen.append(("test", _read(trainer.progress_bar_callback, "test")))

        def on_predict_batch_end(self, trainer, *args):
            seen.append(("predict", _read(trainer.progress_bar_callback, "predict")))

    bar = L.callbacks.TQDMProgressBar(refresh_rate=2) if kind == "tqdm" else L.callbacks.RichProgressBar(2)
    seen.append(("before", _read(bar, "train")))
    kwargs = trainer_kwargs(root, max_epochs=2, callbacks=[bar, Reader()], logger=False, num_sanity_val_steps=1)
    kwargs.update(enable_progress_bar=True, enable_checkpointing=False, enable_model_summary=False)
    trainer = L.pl.Trainer(**kwargs, limit_predict_batches=3)
    model, data = Steps(), DataLoader(torch.ones(5, 1), batch_size=1)
    trainer.fit(model, data, [DataLoader(torch.ones(3, 1)), DataLoader(torch.ones(2, 1))])
    trainer.test(model, data, verbose=False)
    predicted = trainer.predict(model, (torch.ones(1) for _ in itertools.count()))
    after = [_read(bar, stage) for stage in ("train", "val", "test", "predict")]
    return {"seen": seen, "after": after, "predicted": len(predicted)}


@pytest.mark.parametrize("kind", ["tqdm", "rich"])
def test_stage_bars_read_as_lightning_s(kind, tmp_path, capsys):
    """Before: no such attributes (AttributeError at every read)."""
    found = run_both(lambda L, root: bars_read_by_a_callback(L, root, kind), tmp_path)
    capsys.readouterr()  # the bars' own drawing
    assert ("train", (5, 2)) in found["lightning"]["seen"]
    assert found["trainmesh"] == found["lightning"]
