"""Which hooks run, how often and in what order."""

import pytest
import torch
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import DropoutNet, loaders, quiet_trainer, random_classification
from trainmesh.trainer import hooks
from trainmesh.utilities.exceptions import MisconfigurationException


class Recorder(DropoutNet):
    def __init__(self):
        super().__init__()
        self.calls = []

    def setup(self, stage):
        self.calls.append(f"setup:{stage.value}")

    def teardown(self, stage):
        self.calls.append(f"teardown:{stage.value}")

    def on_validation_epoch_start(self):
        self.calls.append("val_epoch_start")

    def on_validation_epoch_end(self):
        self.calls.append("val_epoch_end")

    def on_validation_batch_end(
        self, outputs, batch, batch_idx, dataloader_idx=0
    ):  # Lightning requires it for two loaders
        self.calls.append("val_batch_end")

    def on_train_epoch_start(self):
        self.calls.append("train_epoch_start")

    def on_train_epoch_end(self):
        self.calls.append("train_epoch_end")

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))


def test_hook_counts_with_two_validation_loaders():
    train, val = loaders()
    model = Recorder()
    trainer = quiet_trainer(max_epochs=2, limit_val_batches=2, num_sanity_val_steps=0)
    trainer.fit(model, train, [val, val])
    calls = model.calls
    assert calls[0] == "setup:fit" and calls[-1] == "teardown:fit"  # as Lightning formats it
    assert calls.count("val_epoch_start") == 2 and calls.count("val_epoch_end") == 2  # once per validation
    assert calls.count("val_batch_end") == 2 * 2 * 2
    assert calls.count("train_epoch_start") == 2 and calls.count("train_epoch_end") == 2
    # Validation at the epoch's end runs before the module's on_train_epoch_end.
    assert calls.index("val_epoch_end") < calls.index("train_epoch_end")
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"} <= set(trainer.callback_metrics)


def test_limit_val_batches_zero_skips_sanity_check_and_validation():
    train, val = loaders()
    model = Recorder()
    quiet_trainer(max_epochs=1, limit_val_batches=0).fit(model, train, val)
    assert "val_epoch_start" not in model.calls


def test_empty_train_loader_warns_and_trains_nothing():
    model = Recorder()
    with pytest.warns(UserWarning, match="no training step ran"):
        quiet_trainer(max_epochs=3, limit_train_batches=0).fit(model, loaders()[0])
    assert "train_epoch_start" not in model.calls


def test_setup_builds_layers_before_optimizers():
    class Lazy(tm.Module):
        def setup(self, stage):
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Lazy(), loaders()[0])
    assert trainer.global_step == 12


def test_predict_without_predict_step_or_forward():
    class NoForward(DropoutNet):
        pass

    with pytest.raises(MisconfigurationException, match="neither predict_step"):  # Lightning's type, before the run
        quiet_trainer().predict(NoForward(), DataLoader(random_classification(8), batch_size=4))


@pytest.mark.parametrize("value", [0, -1])
def test_check_val_every_n_epoch_must_be_positive(value):
    with pytest.raises(ValueError, match="check_val_every_n_epoch"):
        quiet_trainer(check_val_every_n_epoch=value)


def test_train_batch_hooks_written_for_lightning_before_1_5_get_dataloader_idx_0():
    """Before Lightning 1.5 the train-batch hooks took a required dataloader_idx (1.x passed 0)."""
    seen = []

    class Old(DropoutNet):
        def on_train_batch_start(self, batch, batch_idx, dataloader_idx):
            seen.append(("module.start", batch_idx, dataloader_idx))

    class OldCallback(tm.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):
            seen.append(("callback.end", batch_idx, dataloader_idx))

    train, val = loaders()
    quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, callbacks=[OldCallback()]).fit(
        Old(), train, val
    )
    assert seen == [("module.start", 0, 0), ("callback.end", 0, 0), ("module.start", 1, 0), ("callback.end", 1, 0)]


def test_whether_a_class_is_a_callback_is_read_once_per_class():
    # Each Trainer asks it of its callbacks argument, usually a list: ~50 hook names looked up.
    class Pruning:  # a callback written for Lightning, duck typed
        def on_validation_end(self, trainer, module):
            print("report")

    assert hooks.is_callback(Pruning()) and not hooks.is_callback([])
    hits = hooks._class_is_callback_like.cache_info().hits
    assert hooks.is_callback(Pruning()) and not hooks.is_callback([1])
    assert hooks._class_is_callback_like.cache_info().hits == hits + 2
