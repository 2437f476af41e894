"""configure_callbacks: called at the start of each fit/validate/test/predict, before prepare_data,
its callbacks merged with the Trainer's by Lightning's rule (a returned callback replaces the
Trainer's of a class it is; checkpoint callbacks go last), and then run like the Trainer's."""

import logging

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer
from trainmesh.callbacks import EarlyStopping, ModelCheckpoint
from trainmesh.trainer.construction import merge_model_callbacks


class Mine(tm.Callback):
    def __init__(self, tag):
        self.tag = tag
        self.ran = []

    def setup(self, trainer, module, stage):
        self.ran.append(("setup", stage))

    def on_fit_start(self, trainer, module):
        self.ran.append(("on_fit_start",))


class MyStop(EarlyStopping):
    pass


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.stages = []

    def prepare_data(self):
        self.stages.append("prepare_data")

    def configure_callbacks(self):
        self.stages.append(self.trainer.stage)
        return [MyStop(monitor="b"), ModelCheckpoint(monitor="b", filename="model"), Mine("model")]

    def training_step(self, batch, batch_idx):
        self.log("b", 1.0)
        return self.layer(batch[0]).sum()

    def test_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def show(callback):
    return f"{type(callback).__name__}:{getattr(callback, 'monitor', getattr(callback, 'tag', ''))}"


def test_model_callbacks_replace_the_trainers_of_their_class_and_checkpoints_go_last(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trainmesh")
    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    trainer_callbacks = [ModelCheckpoint(monitor="b", filename="trainer"), EarlyStopping(monitor="a"), Mine("trainer")]
    trainer = quiet_trainer(
        max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=True, callbacks=trainer_callbacks
    )
    module = Net()
    trainer.fit(module, loader)
    # Lightning 2.6.6, the same program: ['MyStop:b', 'Mine:model', 'ModelCheckpoint:b'], after
    # fit and again after test; configure_callbacks called at fit's and test's start.
    assert [show(cb) for cb in trainer.callbacks] == ["MyStop:b", "Mine:model", "ModelCheckpoint:b"]
    # Lightning 2.6.6's words, logged
    overriding = [line for line in caplog.messages if "configure_callbacks" in line]
    assert len(overriding) == 1
    assert "will override existing callbacks passed to Trainer: EarlyStopping, Mine, ModelCheckpoint" in overriding[0]
    model_mine = trainer.callbacks[1]
    assert model_mine.ran == [("setup", "fit"), ("on_fit_start",)] and trainer_callbacks[2].ran == []
    assert sorted(p.name for p in tmp_path.rglob("*.ckpt")) == ["model.ckpt"]  # the model's checkpoint alone
    trainer.test(module, loader, verbose=False)
    assert [show(cb) for cb in trainer.callbacks] == ["MyStop:b", "Mine:model", "ModelCheckpoint:b"]
    assert module.stages == ["fit", "prepare_data", "test", "prepare_data"]


def test_the_merge_rule():
    class Returns:
        def __init__(self, callbacks):
            self.callbacks = callbacks

        def configure_callbacks(self):
            return self.callbacks

    base, stop, check, extra = tm.Callback(), EarlyStopping(monitor="x"), ModelCheckpoint(), Mine("t")
    given = [check, base, stop, extra]
    assert merge_model_callbacks(given, Returns([])) is given  # nothing returned: the list as it was
    assert merge_model_callbacks(given, object()) is given  # a model without the hook
    mine = Mine("m")
    # A plain Callback is never replaced (Lightning's exception); the subclass replaces its base class.
    merged = merge_model_callbacks(given, Returns(mine))
    assert merged == [base, stop, mine, check]
    my_stop = MyStop(monitor="y")
    assert merge_model_callbacks(given, Returns([my_stop])) == [base, extra, my_stop, check]
    with pytest.raises(TypeError, match="Returns.configure_callbacks returned a str"):
        merge_model_callbacks(given, Returns(["nope"]))
