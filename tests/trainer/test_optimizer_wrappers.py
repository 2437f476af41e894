"""The optimizer and scheduler the loop hands a module are the user's own to anyone who asks, as
Lightning's ``LightningOptimizer`` is: ``isinstance`` holds, and what is read or written through
them is the user's object's state (utilities/wrapped_objects.py; no ``__getattr__``)."""

import copy
import pickle

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.manual_calls import SteppedOnce
from trainmesh.runtime_optimizer import RuntimeOptimizer
from trainmesh.strategies.step import ManualSync


def loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def trainer(tmp_path):
    return tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )


class Base(tm.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)
        self.seen = []

    def loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        self.opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return self.opt


class WarmsUp(Base):
    """A warm-up written in ``optimizer_step``, as Lightning's docs show it."""

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        self.seen.append((isinstance(optimizer, torch.optim.SGD), optimizer.param_groups is self.opt.param_groups))
        optimizer.param_groups[0]["lr"] = 0.01 * (batch_idx + 1)
        optimizer.warmed_up_to = batch_idx  # an attribute of one's own, written through the wrapper
        optimizer.step(closure=optimizer_closure)


def test_optimizer_step_receives_the_users_optimizer_and_writes_reach_it(tmp_path):
    module = WarmsUp()
    trainer(tmp_path).fit(module, loader())
    assert module.seen == [(True, True)] * 4
    assert module.opt.param_groups[0]["lr"] == pytest.approx(0.04)
    assert module.opt.warmed_up_to == 3


class Manual(Base):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        self.seen.append((isinstance(opt, torch.optim.SGD), opt is self.optimizers()))
        opt.zero_grad()
        self.manual_backward(self.loss(batch))
        opt.steps_taken = batch_idx + 1
        opt.step()


def test_manual_optimizers_are_the_users_optimizer_and_writes_reach_it(tmp_path):
    module = Manual()
    run = trainer(tmp_path)
    run.fit(module, loader())
    assert module.seen == [(True, True)] * 4
    assert module.opt.steps_taken == 4
    assert run.global_step == 4  # the wrapper's step still counts


class CountingPrecision:
    scaler = object()  # not None: every step goes through optimizer_step below

    def __init__(self):
        self.steps = 0

    def optimizer_step(self, optimizer, closure=None):
        self.steps += 1
        return optimizer.step(closure)


def test_the_runtime_optimizer_shares_the_users_state_and_keeps_its_step_under_a_scheduler():
    param = nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([param], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # writes opt.step into opt's __dict__
    precision = CountingPrecision()
    wrapped = RuntimeOptimizer.of(opt, precision)
    assert isinstance(wrapped, torch.optim.Adam)
    wrapped.param_groups[0]["lr"] = 0.5
    wrapped.defaults = {**opt.defaults, "lr": 0.5}  # a rebinding write
    assert opt.param_groups[0]["lr"] == 0.5 and opt.defaults["lr"] == 0.5
    param.grad = torch.ones(2)
    wrapped.step()
    scheduler.step()
    # load_state_dict rebinds state through __setstate__ and re-profiles type(self).step
    wrapped.load_state_dict(opt.state_dict())
    wrapped.step()
    assert precision.steps == 2  # neither the scheduler's counter nor the reload bypassed the wrapper
    assert opt.state[param]["step"].item() == 2


def test_the_runtime_optimizer_pickles_and_copies_as_the_wrapped_optimizer():
    opt = torch.optim.Adam([nn.Parameter(torch.ones(2))], lr=0.1)
    wrapped = RuntimeOptimizer.of(opt, CountingPrecision())
    for copied in (pickle.loads(pickle.dumps(wrapped)), copy.deepcopy(wrapped)):
        assert isinstance(copied, RuntimeOptimizer) and isinstance(copied, torch.optim.Adam)
        assert copied.optimizer is not opt and copied.param_groups[0]["lr"] == 0.1


def test_a_scheduler_stepped_once_per_step_is_the_users_scheduler():
    param = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([param], lr=1.0)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    calls = []

    class Once(ManualSync):
        parts = 2

        def once(self, action, *, what):
            calls.append(what)
            return action()

    wrapped = SteppedOnce.of(scheduler, Once(), what="lr scheduler 0.step()")
    assert isinstance(wrapped, torch.optim.lr_scheduler.ReduceLROnPlateau)
    wrapped.patience = 7
    assert scheduler.patience == 7
    wrapped.step(1.0)
    assert calls == ["lr scheduler 0.step()"] and scheduler.last_epoch == 1


def test_an_optimizer_class_without_a_dict_is_refused_with_what_to_do():
    class Slotted(torch.optim.SGD):
        __slots__ = ("extra",)

    opt = Slotted([nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(TypeError, match=r"Slotted cannot be wrapped .*no __slots__ of its own"):
        RuntimeOptimizer.of(opt, CountingPrecision())
