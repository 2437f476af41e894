"""The model's mode around evaluation, switched by Lightning's hooks where Lightning switches it:
an on_validation_model_eval that keeps dropout on changes the validation loss exactly as under
Lightning; without overrides each submodule gets its own mode back (a frozen part stays in eval
mode, and fit leaves the modes as they are, with Lightning's warning); on_*_model_train replaces
the restore; on_validation_model_zero_grad releases gradients before a validation inside fit."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer


def regression():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=4), DataLoader(TensorDataset(x[:8], y[:8]), batch_size=4)


class DropoutNet(tm.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.drop, self.l2 = torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.l2(self.drop(torch.relu(self.l1(x))))

    def training_step(self, batch, batch_idx):
        return F.mse_loss(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.mse_loss(self(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class KeepsDropout(DropoutNet):
    def on_validation_model_eval(self):
        super().on_validation_model_eval()
        self.drop.train()  # Monte Carlo dropout in validation


def _val_loss(cls):
    tm.seed_everything(0)
    module = cls()
    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(module, *regression())
    return float(trainer.callback_metrics["val_loss"]), module


# Lightning 2.6.6 on the same program (seed_everything(0), Trainer(max_epochs=2,
# num_sanity_val_steps=0), the same data and model): val_loss after the second epoch.
LIGHTNING_VAL_LOSS = {KeepsDropout: 0.7435559630393982, DropoutNet: 1.2949050664901733}


@pytest.mark.parametrize("cls", [KeepsDropout, DropoutNet])
def test_an_eval_hook_keeping_dropout_on_gives_lightnings_validation_loss(cls):
    loss, module = _val_loss(cls)
    assert loss == pytest.approx(LIGHTNING_VAL_LOSS[cls], abs=1e-6)
    assert module.training and module.drop.training  # back in train mode after validation


class FrozenBackbone(DropoutNet):
    def __init__(self):
        super().__init__()
        self.l1.eval()  # a frozen part, in eval mode on purpose
        self.modes = []

    def test_step(self, batch, batch_idx):  # trainer.test needs one, as Lightning's does
        pass

    def on_validation_start(self):
        self.modes.append(("validation", self.training, self.l1.training))

    def on_train_batch_start(self, batch, batch_idx):
        self.modes.append(("train", self.training, self.l1.training, self.drop.training))


def test_each_submodule_gets_its_own_mode_back_and_fit_keeps_the_users_modes():
    module = FrozenBackbone()
    train, val = regression()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=1, limit_train_batches=2)
    with pytest.warns(UserWarning, match=r"Found 1 module\(s\) in eval mode .* you can ignore this warning\.$"):
        trainer.fit(module, train, val)
    # Lightning 2.6.6's list for the same program: the sanity check's validation first.
    assert module.modes == [
        ("validation", False, False),
        ("train", True, False, True),
        ("train", True, False, True),
        ("validation", False, False),
    ]
    assert module.training and not module.l1.training
    trainer.test(module, val, verbose=False)
    trainer.predict(module, DataLoader(torch.randn(8, 8), batch_size=4))  # the default predict_step: forward(batch)
    assert module.training and not module.l1.training and module.drop.training


class TrainHooks(DropoutNet):
    def __init__(self):
        super().__init__()
        self.calls = []

    def test_step(self, batch, batch_idx):
        pass

    def on_validation_model_train(self):
        self.calls.append("on_validation_model_train")  # leaves the model in eval mode

    def on_test_model_train(self):
        self.calls.append("on_test_model_train")
        self.l2.train()


def test_an_overridden_train_hook_replaces_the_restore():
    module = TrainHooks()
    train, val = regression()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0)
    trainer.validate(module, val, verbose=False)
    assert module.calls == ["on_validation_model_train"] and not module.training
    trainer.test(module, val, verbose=False)
    assert module.calls[-1] == "on_test_model_train"
    assert not module.training and module.l2.training and not module.l1.training


class OptimizesL2(DropoutNet):
    """l1 is not in the optimizer: its gradients pile up until on_validation_model_zero_grad."""

    def __init__(self):
        super().__init__()
        self.l1_grad_released = []

    def on_validation_start(self):
        self.l1_grad_released.append(self.l1.weight.grad is None)

    def configure_optimizers(self):
        return torch.optim.SGD(self.l2.parameters(), lr=0.1)


class CountsReleases(OptimizesL2):
    def on_validation_model_zero_grad(self):
        self.l1_grad_released.append(("hook", self.global_step))
        super().on_validation_model_zero_grad()


def test_gradients_are_released_before_each_validation_inside_fit_outside_accumulation():
    """The lists below are the ones Lightning 2.6.6 records for the same program."""
    train, val = regression()  # 4 training batches; validation after the 2nd and the 4th (the epoch's end)
    module = OptimizesL2()
    quiet_trainer(max_epochs=1, val_check_interval=2, accumulate_grad_batches=2).fit(module, train, val)
    assert module.l1_grad_released == [True, True, True]  # the sanity check's, then the default hook's zero_grad
    module = CountsReleases()
    quiet_trainer(max_epochs=1, val_check_interval=2, accumulate_grad_batches=2).fit(module, train, val)
    assert module.l1_grad_released == [True, ("hook", 1), True, ("hook", 2), True]  # none before the sanity check
    # With accumulate 4 the first validation falls inside the window: the gradients wait for the step.
    module = CountsReleases()
    quiet_trainer(max_epochs=1, val_check_interval=2, accumulate_grad_batches=4).fit(module, train, val)
    assert module.l1_grad_released == [True, False, ("hook", 1), True]
    quiet_trainer().validate(module, val, verbose=False)  # not outside fit
    assert module.l1_grad_released[-1] is True and len(module.l1_grad_released) == 5
