"""A callback whose ``on_save_checkpoint`` returns a value (Lightning 1.x's way to save a callback's state until
1.6; trainer/lightning1/legacy_hooks.py): pytorch-lightning 1.9.5 refuses it with a ValueError at the save
(recorded: tests/helpers/lightning_1_9_deprecations.json, ``leftovers``), Lightning 2.6 ignores the value and
hands ``on_load_checkpoint`` the whole checkpoint. The name is in both releases, so trainmesh does what 2.6
does (before: it stored the value and handed it back, so a program that stops with a KeyError under Lightning
trained on under trainmesh, l-progs3 p28), with one line saying the value is not saved. (1.x's dataloader
hooks and ``add_to_queue`` / ``get_from_queue``, which no release measured against calls, are not called:
test_legacy_hooks.py.)
"""

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.lightning1_leftovers import returned_callback_state

pl = pytest.importorskip("lightning.pytorch")
RECORDED = Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_deprecations.json"


def test_a_returned_callback_state_is_not_saved_as_lightning_2_6_and_1_9_5_refuses_it():
    recorded = json.loads(RECORDED.read_text())["leftovers"]["returned_callback_state"]
    assert recorded["raised"] == "ValueError" and "no longer supported as of v1.8" in recorded["message"]
    theirs, ours = returned_callback_state(pl), returned_callback_state(tm)
    # before: {"stored": 1, "load_got": ["the state"]}
    assert ours == theirs == {"raised": "", "stored": 0, "load_got": ["the checkpoint"]}


def _loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)


def _resume_1x_counter(framework, folder: Path) -> list:
    """l-progs3 p28's pattern: ``on_load_checkpoint(trainer, module, callback_state)`` reading its saved count."""

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Counter(framework.Callback):
        def __init__(self):
            self.count = 0

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.count += 1

        def on_save_checkpoint(self, trainer, module, checkpoint):
            return {"count": self.count}

        def on_load_checkpoint(self, trainer, module, callback_state):
            self.count = callback_state["count"]

    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = framework.Trainer(max_epochs=1, callbacks=[Counter()], enable_checkpointing=False, **quiet)
        trainer.fit(Net(), _loader())
        trainer.save_checkpoint(folder / "one.ckpt")
        resumed = framework.Trainer(max_epochs=2, callbacks=[Counter()], enable_checkpointing=False, **quiet)
        try:
            resumed.fit(Net(), _loader(), ckpt_path=folder / "one.ckpt")
            outcome = "resumed"
        except KeyError as exc:
            outcome = f"KeyError {exc}"
    said = [str(w.message) for w in caught if "on_save_checkpoint returns a value" in str(w.message)]
    return [outcome, said]


def test_a_1x_callback_reading_its_returned_state_stops_as_under_lightning_2_6(tmp_path):
    (tmp_path / "pl").mkdir()
    (tmp_path / "tm").mkdir()
    theirs, ours = _resume_1x_counter(pl, tmp_path / "pl"), _resume_1x_counter(tm, tmp_path / "tm")
    assert ours[0] == theirs[0] == "KeyError 'count'"  # before: trainmesh resumed
    assert theirs[1] == [] and len(ours[1]) == 1  # trainmesh says the value is not saved, once
    assert ours[1][0].startswith("Counter.on_save_checkpoint returns a value, which is not saved")
