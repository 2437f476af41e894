"""Hook calls recorded with their arguments, the same program run by Lightning 2.6 and by trainmesh
and compared as data (Lightning's tests_pytorch/models/test_hooks.py records them so): a hook set
on the module itself (a wrapper around the default, a plain function, ``None``), ``setup`` and
``teardown`` given ``stage`` by keyword, and ``zero_grad()`` at the start of each stage.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")

# Hooks wrapped on the module instance; their defaults do nothing or little, as most programs'.
WRAPPED = (
    "setup",
    "teardown",
    "zero_grad",
    "on_fit_start",
    "on_train_epoch_start",
    "on_validation_start",
    "on_predict_start",
    "on_test_epoch_end",
    "on_before_batch_transfer",
    "on_after_batch_transfer",
    "configure_gradient_clipping",
    "lr_scheduler_step",
)


def _kind(value: Any) -> Any:
    """What a recorded argument is, comparable across the two frameworks."""
    if isinstance(value, (int, str, float, bool, type(None))):
        return value
    return type(value).__name__ if isinstance(value, torch.Tensor) else "object"


def _program(framework: str, root: str) -> list[Any]:
    if framework == "lightning":
        import lightning.pytorch as pl

        Module, Callback, Trainer = pl.LightningModule, pl.Callback, pl.Trainer
    else:
        import trainmesh as tm

        Module, Callback, Trainer = tm.Module, tm.Callback, tm.Trainer
    calls: list[Any] = []

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            for hook in WRAPPED:  # as a program (or Lightning's own test) wraps a hook on the instance
                method = getattr(self, hook)
                wrapper = functools.partial(self._record, hook, method)
                functools.update_wrapper(wrapper, method)
                setattr(self, hook, wrapper)
            self.on_train_end = lambda: calls.append(("on_train_end (plain function)",))
            self.on_validation_model_train = None  # None: not called, as Lightning skips it

        def _record(self, hook: str, method: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((hook, [_kind(a) for a in args], sorted((k, _kind(v)) for k, v in kwargs.items())))
            return method(*args, **kwargs)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch).sum())

        def test_step(self, batch, batch_idx):
            self.log("t", self.layer(batch).sum())

        def predict_step(self, batch, batch_idx):
            return self.layer(batch)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1)]

        def train_dataloader(self):
            return DataLoader(torch.randn(4, 4), batch_size=2)

        val_dataloader = test_dataloader = predict_dataloader = train_dataloader

    class Stages(Callback):
        def setup(self, trainer, pl_module, **kwargs):  # reads stage from kwargs: Lightning passes it so
            calls.append(("Callback.setup", sorted(kwargs)))

        def teardown(self, trainer, pl_module, **kwargs):
            calls.append(("Callback.teardown", sorted(kwargs)))

    torch.manual_seed(0)
    model = Net()
    model.layer.weight.grad = torch.ones_like(model.layer.weight)  # a gradient left from before the run
    trainer = Trainer(
        default_root_dir=root,
        max_epochs=1,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[Stages()],
    )
    trainer.fit(model)
    model.layer.weight.grad = torch.ones_like(model.layer.weight)
    trainer.test(model, verbose=False)
    calls.append(("grad after test", model.layer.weight.grad))
    trainer.predict(model)
    return calls


def test_hooks_set_on_the_module_and_their_arguments_match_lightning(tmp_path):
    lightning = _program("lightning", str(tmp_path / "l"))
    ours = _program("trainmesh", str(tmp_path / "t"))
    assert ("grad after test", None) in lightning  # Lightning's zero_grad() at the stage's start
    assert ours == lightning


def _default_steps(framework: str, root: str) -> list[Any]:
    """The Module's default steps: ``predict_step`` runs ``forward(batch)`` on the whole batch (here a
    pair the forward unpacks), and a subclass's step taking ``dataloader_idx`` calls ``super()``'s."""
    if framework == "lightning":
        import lightning.pytorch as pl

        Module, Trainer = pl.LightningModule, pl.Trainer
    else:
        import trainmesh as tm

        Module, Trainer = tm.Module, tm.Trainer

    class PairForward(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, batch):
            x, y = batch
            return self.layer(x) - y

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            return super().test_step(batch, batch_idx, dataloader_idx)

    torch.manual_seed(0)
    pairs = torch.utils.data.TensorDataset(torch.randn(4, 4), torch.randn(4, 1))
    trainer = Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False)
    model = PairForward()
    tested = trainer.test(model, [DataLoader(pairs, batch_size=2)] * 2, verbose=False)
    return [tested, trainer.predict(model, DataLoader(pairs, batch_size=2))]


def test_default_steps_take_lightning_s_arguments_and_predict_forwards_the_whole_batch(tmp_path):
    lightning = _default_steps("lightning", str(tmp_path / "l"))
    ours = _default_steps("trainmesh", str(tmp_path / "t"))
    assert [len(p) for p in ours[1]] == [len(p) for p in lightning[1]] == [2, 2]
    assert ours[0] == lightning[0]
    for mine, theirs in zip(ours[1], lightning[1], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def _limit_zero(framework: str, root: str) -> list[Any]:
    """``validate``/``test`` with a limit of 0 batches: what is asked for and returned."""
    if framework == "lightning":
        import lightning.pytorch as pl

        Module, Trainer = pl.LightningModule, pl.Trainer
    else:
        import trainmesh as tm

        Module, Trainer = tm.Module, tm.Trainer
    asked: list[Any] = []

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch).sum())

        test_step = validation_step

        def val_dataloader(self):
            asked.append("val_dataloader")
            return DataLoader(torch.randn(4, 4), batch_size=2)

        def test_dataloader(self):
            asked.append("test_dataloader")
            return DataLoader(torch.randn(4, 4), batch_size=2)

    trainer = Trainer(
        default_root_dir=root,
        limit_val_batches=0,
        limit_test_batches=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return [trainer.validate(Net(), verbose=False), trainer.test(Net(), verbose=False), asked]


def test_a_limit_of_zero_batches_asks_for_no_loader_and_returns_nothing_as_lightning(tmp_path):
    lightning = _limit_zero("lightning", str(tmp_path / "l"))
    assert lightning == [[], [], []]
    assert _limit_zero("trainmesh", str(tmp_path / "t")) == lightning
