"""Lightning 1.x hook names that Lightning removed are not called, as no release measured against calls
them, with one line each naming the replacement (trainer/lightning1/legacy_hooks.py).

pytorch-lightning 1.9.5 refuses most of them before the run (its ``configuration_validator``) and
ignores the rest; Lightning 2.6 ignores them all: a program that defines one (the UvA energy-model
tutorial's callbacks define ``on_epoch_end``) runs as if it did not. The tests run the same classes
under Lightning 2.6 and under trainmesh: no hook of these is called under either, and a callback that
draws random numbers in ``on_epoch_end`` trains Lightning's weights bit for bit (before: trainmesh
called it, so the next epoch's shuffle differed).
"""

import importlib
import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainmesh.trainer.lightning1.legacy_hooks import CALLBACK_HOOKS, DATAMODULE_HOOKS, MODULE_HOOKS

pl = pytest.importorskip("lightning.pytorch")
tm = importlib.import_module("trainmesh")

FRAMEWORKS = {"lightning": pl, "trainmesh": tm}
RECORDED = Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_deprecations.json"


def _data(shuffle=False):
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)),
        batch_size=4,
        shuffle=shuffle,
    )


def _recorder(calls, name):
    def hook(self, *args, **kwargs):
        calls.append(f"{type(self).__name__}.{name}")

    return hook


def _classes(framework, calls):
    """A module, a callback and a data module defining every removed hook, recording each call."""

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.cross_entropy(self(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class OldCallback(framework.Callback):
        pass

    class Data(framework.LightningDataModule):
        def train_dataloader(self):
            return _data()

        def val_dataloader(self):
            return _data()

        def test_dataloader(self):
            return _data()

        def predict_dataloader(self):
            return _data()

    for name in MODULE_HOOKS:
        setattr(Net, name, _recorder(calls, name))
    for name in CALLBACK_HOOKS:
        setattr(OldCallback, name, _recorder(calls, name))
    for name in DATAMODULE_HOOKS:
        setattr(Data, name, _recorder(calls, name))
    return Net, OldCallback, Data


def _trainer(framework, root, **options):
    settings = dict(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
    )
    return framework.Trainer(**{**settings, **options})


def _every_stage(name, root):
    """fit (with the sanity check and a checkpoint), a resume, validate, test and predict."""
    framework, calls = FRAMEWORKS[name], []
    Net, OldCallback, Data = _classes(framework, calls)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _trainer(framework, root, callbacks=[OldCallback()])
        model, data = Net(), Data()
        trainer.fit(model, datamodule=data)
        trainer.save_checkpoint(root / "saved.ckpt")
        _trainer(framework, root, max_epochs=2, callbacks=[OldCallback()]).fit(
            Net(), datamodule=Data(), ckpt_path=root / "saved.ckpt"
        )
        for stage in ("validate", "test", "predict"):
            getattr(trainer, stage)(model, datamodule=data)
    return calls, [str(w.message) for w in caught if "is not called" in str(w.message)]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_no_removed_hook_is_called_under_lightning_or_trainmesh(tmp_path):
    (tmp_path / "lightning").mkdir()
    (tmp_path / "trainmesh").mkdir()
    theirs, _ = _every_stage("lightning", tmp_path / "lightning")
    ours, lines = _every_stage("trainmesh", tmp_path / "trainmesh")
    assert theirs == [] and ours == []  # before: trainmesh called on_epoch_start/end, on_batch_*, ...
    # One line per owner and hook (each run says it again), naming what to use instead.
    first_run = {line.split(" ")[0] for line in lines}
    expected = {f"Net.{name}" for name in MODULE_HOOKS} | {f"OldCallback.{name}" for name in CALLBACK_HOOKS}
    expected |= {f"Data.{name}" for name in DATAMODULE_HOOKS}
    assert first_run == expected
    assert all(" Use " in line for line in lines)


def _random_epoch_end_weights(name):
    """The UvA energy-model tutorial's pattern: callbacks with ``on_epoch_end`` that sample images."""
    framework = FRAMEWORKS[name]
    Net, _, _ = _classes(framework, [])

    class Sampler(framework.Callback):
        def on_epoch_end(self, trainer, pl_module):
            torch.rand(1000)

    framework.seed_everything(7)
    model = Net()
    trainer = framework.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Sampler()],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, _data(shuffle=True), _data())
    return [p.detach().clone() for p in model.parameters()]


def test_a_callback_drawing_random_numbers_in_on_epoch_end_trains_lightnings_weights():
    theirs, ours = _random_epoch_end_weights("lightning"), _random_epoch_end_weights("trainmesh")
    for a, b in zip(theirs, ours, strict=True):
        assert torch.equal(a, b)


def test_each_not_called_line_says_what_pytorch_lightning_1_9_5_did(tmp_path):
    """Each line says whether pytorch-lightning 1.9.5 stopped before the run for the hook (its
    ``configuration_validator``: ``on_epoch_end``, a callback's ``on_batch_start``, a data module's
    ``on_save_checkpoint``, ...) or ran without calling it (``get_progress_bar_dict``, the module's
    ``on_batch_start``, ``on_keyboard_interrupt``, ...), as recorded from 1.9.5 (before: every line said
    "1.8 and 1.9 refuse it or ignore it"). trainmesh runs and calls none, as Lightning 2.6."""
    recorded = json.loads(RECORDED.read_text())["leftovers"]["removed_hooks"]
    calls = []
    Net, OldCallback, Data = _classes(tm, calls)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(tm, tmp_path, callbacks=[OldCallback()]).fit(Net(), datamodule=Data())
    lines = {line.split(" ")[0]: line for line in (str(w.message) for w in caught) if "is not called" in line}
    owners = {"module": "Net", "callback": "OldCallback", "datamodule": "Data"}
    assert calls == []
    for kind, hooks in recorded.items():
        for name, (raised, _, called) in hooks.items():
            assert called == []  # 1.9.5 calls none of them either
            line = lines.pop(f"{owners[kind]}.{name}")
            then = "stops before the run for it" if raised != "trained" else "runs without calling it"
            assert f"pytorch-lightning 1.9.5 {then}," in line, (kind, name, raised, line)
    assert lines == {}
