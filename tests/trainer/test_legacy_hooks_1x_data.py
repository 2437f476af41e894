"""A Lightning 1.x callback whose ``on_save_checkpoint`` returns a value (trainer/lightning1/legacy_hooks.py):
the value is stored as the callback's state and given back to ``on_load_checkpoint(trainer, pl_module,
callback_state)``, as pytorch-lightning 1.6.5's ``trainer/trainer.py`` ``_call_callbacks_on_save_checkpoint``
/ ``_call_callbacks_on_load_checkpoint`` did, with one deprecation line, so that checkpoints written
that way stay loadable. (1.x's dataloader hooks and ``add_to_queue`` / ``get_from_queue``, which no
release measured against calls, are not called: test_legacy_hooks.py.)
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer


def _loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.calls = []

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        pass

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Counter(tm.Callback):
    """A Lightning 1.x callback: its state is what on_save_checkpoint returns."""

    def __init__(self):
        self.count, self.loaded = 0, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.count += 1

    def on_save_checkpoint(self, trainer, module, checkpoint):
        return {"count": self.count}

    def on_load_checkpoint(self, trainer, module, callback_state):
        self.loaded.append(callback_state)
        self.count = callback_state["count"]


class Modern(tm.Callback):
    """A Lightning 2.x callback in the same run: it gets the checkpoint, as before."""

    def __init__(self):
        self.loaded = []

    def on_save_checkpoint(self, trainer, module, checkpoint):
        checkpoint["modern"] = 5

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self.loaded.append(checkpoint)


def test_a_1x_callbacks_returned_state_is_saved_under_its_key_and_given_back_to_on_load_checkpoint(tmp_path):
    counter, modern = Counter(), Modern()
    trainer = quiet_trainer(max_epochs=1, callbacks=[counter, modern])
    trainer.fit(Net(), _loader())
    path = tmp_path / "one.ckpt"
    with pytest.warns(FutureWarning, match=r"Counter\.on_save_checkpoint returns a value: .*state_dict\(\)"):
        trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    assert saved["callbacks"][counter.state_key] == {"count": 2}  # 8 samples, batches of 4
    resumed_counter, resumed_modern = Counter(), Modern()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        resumed = quiet_trainer(max_epochs=2, callbacks=[resumed_counter, resumed_modern])
        resumed.fit(Net(), _loader(), ckpt_path=path)
    assert resumed_counter.loaded == [{"count": 2}]
    assert resumed_counter.count == 4  # restored, then two more batches
    assert len(resumed_modern.loaded) == 1 and resumed_modern.loaded[0]["modern"] == 5
