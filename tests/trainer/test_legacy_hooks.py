"""Lightning 1.x hook names, called where Lightning 1.x called them, each with one deprecation line
(trainer/lightning1/legacy_hooks.py).

The expected orders are read from pytorch-lightning 1.6.5's source (1.5.10's where 1.6 had dropped a
module hook): ``loops/fit_loop.py`` (on_epoch_start before on_train_epoch_start, on_epoch_end after
on_train_epoch_end), ``loops/dataloader/evaluation_loop.py`` (the same around validation, the sanity
check's included, and test epochs; none around prediction), ``loops/epoch/training_epoch_loop.py``
(on_batch_start before on_train_batch_start, on_batch_end after on_train_batch_end; 1.5's
``call_hook`` calls the module's too and ends the epoch on -1), ``trainer/trainer.py``
(``on_init_start``/``on_init_end`` in ``__init__``; ``on_before_accelerator_backend_setup`` after
prepare_data, before the setup hooks; ``on_pretrain_routine_*`` after on_fit_start, before the
sanity check; ``configure_sharded_model`` then ``on_configure_sharded_model``;
``on_keyboard_interrupt`` before on_exception) and ``trainer/connectors/checkpoint_connector.py``
(the data module's on_save_checkpoint after the module's, its on_load_checkpoint first;
``on_hpc_save`` / ``on_hpc_load`` at the SLURM save and resume). Callbacks before the module, as in
1.x and 2.x.
"""

import os
import signal
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.supervision.preemption import Preempted

CALLS: list[str] = []

MODULE_LEGACY = (
    "on_epoch_start on_epoch_end on_batch_start on_batch_end on_pretrain_routine_start on_pretrain_routine_end"
)
NEIGHBOURS = """
    on_fit_start on_train_start on_train_epoch_start on_train_epoch_end on_train_batch_start on_train_batch_end
    on_validation_epoch_start on_validation_epoch_end on_test_epoch_start on_test_epoch_end
    on_predict_epoch_start on_predict_epoch_end
"""


def _recorder(name):
    def hook(self, *args, **kwargs):  # setup/teardown get stage by keyword, as Lightning 1.x and 2.x pass it
        CALLS.append(f"{self.prefix}{name}")

    return hook


def loader(n=2):
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(2 * n, 4, generator=g), torch.randint(0, 2, (2 * n,), generator=g)), 2)


class Net(tm.Module):
    prefix = ""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        CALLS.append("training_step")
        return F.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        pass

    def predict_step(self, batch, batch_idx):  # the default is forward(batch), as Lightning's: batch is a pair
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Legacy(Net):
    pass


class LegacyCallback(tm.Callback):
    prefix = "Callback."


for _name in (MODULE_LEGACY + NEIGHBOURS).split():
    setattr(Legacy, _name, _recorder(_name))
    setattr(LegacyCallback, _name, _recorder(_name))
LegacyCallback.on_sanity_check_start = _recorder("on_sanity_check_start")
LegacyCallback.on_sanity_check_end = _recorder("on_sanity_check_end")


def quiet(**kwargs):
    settings = dict(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    return tm.Trainer(**{**settings, **kwargs})


def both(*hooks):
    """Each hook on the callback, then on the module."""
    return [call for hook in hooks for call in (f"Callback.{hook}", hook)]


def evaluation_epoch(kind):
    return both("on_epoch_start", f"on_{kind}_epoch_start") + both(f"on_{kind}_epoch_end", "on_epoch_end")


def test_epoch_batch_and_pretrain_hooks_run_where_lightning_1x_ran_them():
    CALLS.clear()
    trainer = quiet(callbacks=[LegacyCallback()], num_sanity_val_steps=1, limit_val_batches=1)
    module = Legacy()
    with pytest.warns(FutureWarning) as caught:
        trainer.fit(module, loader(1), loader(1))
    batch = [
        *both("on_batch_start", "on_train_batch_start"),
        "training_step",
        *both("on_train_batch_end", "on_batch_end"),
    ]
    assert CALLS == [
        *both("on_fit_start", "on_pretrain_routine_start", "on_pretrain_routine_end"),
        "Callback.on_sanity_check_start",
        *evaluation_epoch("validation"),
        "Callback.on_sanity_check_end",
        *both("on_train_start", "on_epoch_start", "on_train_epoch_start"),
        *batch,
        *evaluation_epoch("validation"),  # the epoch's validation, before on_train_epoch_end
        *both("on_train_epoch_end", "on_epoch_end"),
    ]
    # One deprecation line per hook and class, naming the Lightning 2.x hook to use instead.
    messages = sorted(str(w.message) for w in caught if "Lightning 1.x hook" in str(w.message))
    assert len(messages) == 12 and len(set(messages)) == 12
    assert any(
        m.startswith("Legacy.on_epoch_start is a Lightning 1.x hook") and "Use on_train_epoch_start" in m
        for m in messages
    )
    assert any(m.startswith("LegacyCallback.on_batch_end") and "on_train_batch_end(trainer" in m for m in messages)
    CALLS.clear()
    trainer.test(module, loader(1), verbose=False)
    assert CALLS == evaluation_epoch("test")
    CALLS.clear()
    trainer.predict(module, loader(1))
    assert CALLS == both("on_predict_epoch_start", "on_predict_epoch_end")  # 1.x: no on_epoch_* around predict


class StopsEpochs(Net):
    def on_batch_start(self):
        return -1 if self.current_epoch == 0 else None


def test_module_on_batch_start_returning_minus_one_ends_the_epoch():
    """Lightning 1.5's call_hook("on_batch_start"): the module's -1 ends the epoch, as on_train_batch_start's."""
    CALLS.clear()
    with pytest.warns(FutureWarning, match="StopsEpochs.on_batch_start"):
        quiet(max_epochs=2).fit(StopsEpochs(), loader(3))
    assert CALLS == ["training_step"] * 3  # none in epoch 0, every batch of epoch 1


class Lifecycle(tm.Callback):
    prefix = "Callback."

    def on_init_start(self, trainer):
        CALLS.append("Callback.on_init_start")
        self.had_callbacks = trainer.callbacks[0] is self

    on_init_end = _recorder("on_init_end")
    on_before_accelerator_backend_setup = _recorder("on_before_accelerator_backend_setup")
    on_configure_sharded_model = _recorder("on_configure_sharded_model")
    setup = _recorder("setup")
    on_fit_start = _recorder("on_fit_start")
    on_keyboard_interrupt = _recorder("on_keyboard_interrupt")
    on_exception = _recorder("on_exception")


class Sharded(Net):
    configure_sharded_model = _recorder("configure_sharded_model")  # with configure_model too, Lightning raises
    setup = _recorder("setup")


class Data(tm.DataModule):
    prefix = "DataModule."
    prepare_data = _recorder("prepare_data")
    setup = _recorder("setup")
    on_exception = _recorder("on_exception")

    def train_dataloader(self):
        return loader(1)


def test_trainer_setup_hooks_run_where_lightning_1x_ran_them():
    CALLS.clear()
    callback = Lifecycle()
    with pytest.warns(FutureWarning, match="Lifecycle.on_init_start is a Lightning 1.x hook"):
        trainer = quiet(callbacks=[callback])
    assert CALLS == ["Callback.on_init_start", "Callback.on_init_end"] and callback.had_callbacks
    CALLS.clear()
    with pytest.warns(
        FutureWarning, match="Sharded.configure_sharded_model is Lightning's former name of configure_model"
    ):
        trainer.fit(Sharded(), datamodule=Data())
    assert CALLS == [
        "DataModule.prepare_data",
        "Callback.on_before_accelerator_backend_setup",  # after prepare_data, before every setup hook
        "DataModule.setup",
        "Callback.setup",
        "setup",
        "configure_sharded_model",  # Lightning 2.x still calls it, where configure_model runs
        "Callback.on_configure_sharded_model",
        "Callback.on_fit_start",
        "training_step",
    ]


class Interrupted(Net):
    def training_step(self, batch, batch_idx):
        raise KeyboardInterrupt


def test_ctrl_c_calls_on_keyboard_interrupt_then_on_exception():
    CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer = quiet(callbacks=[Lifecycle()])
        CALLS.clear()
        with pytest.raises(SystemExit):  # Lightning 2.6's sys.exit(1) after the hooks
            trainer.fit(Interrupted(), datamodule=Data())
    assert CALLS[-3:] == ["Callback.on_keyboard_interrupt", "Callback.on_exception", "DataModule.on_exception"]


class CheckpointHooks(Net):
    prefix = ""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_save_checkpoint(self, checkpoint):
        CALLS.append("on_save_checkpoint")

    def on_load_checkpoint(self, checkpoint):
        CALLS.append("on_load_checkpoint")
        self.seen.append(torch.equal(self.layer.weight.detach(), checkpoint["state_dict"]["layer.weight"]))

    def on_hpc_save(self, checkpoint):
        CALLS.append(f"on_hpc_save:{checkpoint['global_step']}")

    def on_hpc_load(self, checkpoint):
        CALLS.append(f"on_hpc_load:{checkpoint['global_step']}")


class SignalAt(tm.Callback):
    """SIGTERM to this process after the given step: the loop saves the step's checkpoint and stops."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class StatefulData(Data):
    def state_dict(self):
        CALLS.append("DataModule.state_dict")
        return {"position": 3}

    def load_state_dict(self, state_dict):
        CALLS.append(f"DataModule.load_state_dict:{state_dict['position']}")

    def on_save_checkpoint(self, checkpoint):
        CALLS.append("DataModule.on_save_checkpoint")

    def on_load_checkpoint(self, checkpoint):
        CALLS.append("DataModule.on_load_checkpoint")

    def train_dataloader(self):
        return loader(4)


def checkpoint_calls():
    return [c for c in CALLS if "checkpoint" in c or "state_dict" in c or "hpc" in c]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_hpc_and_data_module_checkpoint_hooks(tmp_path):
    """A stop signal's save is 1.x's SLURM save (on_hpc_save), the restarted run's resume its
    resume (on_hpc_load); the data module's 1.x checkpoint hooks around the module's."""
    CALLS.clear()
    with pytest.warns(FutureWarning, match="StatefulData.on_save_checkpoint.*Use state_dict"):
        with pytest.raises(Preempted):
            quiet(max_epochs=2, default_root_dir=tmp_path, callbacks=[SignalAt(2)]).fit(
                CheckpointHooks(), datamodule=StatefulData()
            )
    assert checkpoint_calls() == [
        "DataModule.state_dict",
        "on_save_checkpoint",
        "DataModule.on_save_checkpoint",
        "on_hpc_save:2",
    ]
    CALLS.clear()
    module = CheckpointHooks()
    trainer = quiet(max_epochs=2, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=StatefulData())  # no ckpt_path: the preempted run's checkpoint is found
    assert checkpoint_calls() == [
        "DataModule.on_load_checkpoint",
        "on_load_checkpoint",
        "on_hpc_load:2",
        "DataModule.load_state_dict:3",
    ]
    assert CALLS.count("training_step") == 8 - 2 and trainer.global_step == 8
    # As in Lightning, on_load_checkpoint runs before the weights are loaded (it may change them).
    assert module.seen == [False]
    CALLS.clear()
    trainer.save_checkpoint(tmp_path / "plain.ckpt")  # not a stop signal's: no on_hpc_save
    assert checkpoint_calls() == ["DataModule.state_dict", "on_save_checkpoint", "DataModule.on_save_checkpoint"]


class BarItems(Net):
    def training_step(self, batch, batch_idx):
        self.log("acc", 0.5, prog_bar=True)
        return super().training_step(batch, batch_idx)

    def get_progress_bar_dict(self):
        items = super().get_progress_bar_dict()
        items.pop("v_num", None)
        items["lr"] = 0.1
        return items


class BarSeen(tm.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen = dict(trainer.progress_bar_metrics)


def test_get_progress_bar_dict_gives_the_bars_standard_items(tmp_path, capsys):
    """1.x's bar showed {**module.get_progress_bar_dict(), **logged prog_bar values}; the base
    gives the running loss and the logger's version (v_num)."""
    seen = BarSeen()
    with pytest.warns(FutureWarning, match="BarItems.get_progress_bar_dict.*prog_bar=True"):
        quiet(callbacks=[seen], default_root_dir=tmp_path, logger=True).fit(BarItems(), loader(1))
    assert list(seen.seen) == ["loss", "lr", "acc"] and seen.seen["lr"] == 0.1 and seen.seen["acc"] == 0.5
    module = Net()
    plain = BarSeen()
    quiet(callbacks=[plain], default_root_dir=tmp_path, logger=True).fit(module, loader(1))
    assert module.get_progress_bar_dict() == {"v_num": module.logger.version}  # after fit: no running loss
    # a module that does not override it: progress_bar_metrics holds what was logged with prog_bar
    # only, as pytorch-lightning 1.9.5's ({} here; its bar added the loss and v_num itself)
    assert list(plain.seen) == []
