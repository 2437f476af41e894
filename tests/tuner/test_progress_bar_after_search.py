"""After each search the tuner calls the run's progress bar's ``enable()``, as Lightning 2.6's
``Tuner.lr_find`` / ``scale_batch_size`` (and pytorch-lightning 1.9.5's ``trainer.tune``) do; their
``disable()`` before the search reaches no bar (the search's callbacks have replaced the run's by then).
trainmesh called neither, so a program's bar that counts on ``enable()`` (a custom bar drawing again)
saw a difference. 2.6 compared by running both here; 1.9.5 from its recording
(``helpers/lightning1_owner_items.py``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.lightning1_owner_records import RECORDED, under_trainmesh
from helpers.programs import port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _bar_calls(name: str, search: str, root) -> list[str]:
    L = port(name)
    tuner_module = __import__(f"{L.pl.__name__}.tuner", fromlist=["Tuner"])
    calls: list[str] = []

    class Bar(L.callbacks.ProgressBar):
        def disable(self):
            calls.append(f"disable fitting={self.trainer.state.fn == 'fit'}")

        def enable(self):
            calls.append(f"enable fitting={self.trainer.state.fn == 'fit'}")

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.lr, self.batch_size = 0.1, 2

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def train_dataloader(self):
            return DataLoader(torch.randn(16, 4, generator=torch.Generator().manual_seed(0)), self.batch_size)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    settings = dict(max_epochs=1, logger=False, enable_checkpointing=False, limit_train_batches=2)
    kwargs = trainer_kwargs(root / name, callbacks=[Bar()], **settings)
    kwargs.pop("enable_progress_bar")  # the bar is given
    trainer = L.pl.Trainer(**kwargs)
    tuner = tuner_module.Tuner(trainer)
    if search == "lr":
        tuner.lr_find(Model(), num_training=3)
    else:
        tuner.scale_batch_size(Model(), max_trials=2, steps_per_trial=1)
    return calls


@pytest.mark.parametrize("search", ["lr", "batch_size"])
def test_the_tuner_enables_the_run_s_bar_after_its_search_as_lightning_s(search, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, ours = (_bar_calls(name, search, tmp_path) for name in ("lightning", "trainmesh"))
    assert ours == theirs == ["enable fitting=True"]


def test_a_1x_tune_enables_the_bar_after_each_search_as_1_9_5():
    assert under_trainmesh("tune_bar_calls") == RECORDED["tune_bar"]
