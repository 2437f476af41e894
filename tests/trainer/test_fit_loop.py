"""The fit loop on one device: accuracy, logging, accumulation, clipping, schedulers, limits."""

import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import (
    DropoutNet,
    TutorialModule,
    flat_weights,
    fp16_on_cpu,
    loaders,
    quiet_trainer,
    random_classification,
)
from trainmesh.data import DigitsDataModule


class ValidationCounting(DropoutNet):
    def __init__(self):
        super().__init__()
        self.val_batches = 0

    def validation_step(self, batch, batch_idx):
        self.val_batches += 1
        return super().validation_step(batch, batch_idx)


def test_seed_tutorial_module_trains_on_digits_and_epoch_accuracy_is_exact():
    tm.seed_everything(1)
    # The seed's model and hyperparameters, but lr 1e-3: digits has 1,258 training images
    # against MNIST's 55,000, so 1e-4 would take many more epochs.
    model = TutorialModule(learning_rate=1e-3)
    dm = DigitsDataModule(batch_size=16)
    trainer = quiet_trainer(max_epochs=5)
    trainer.fit(model, datamodule=dm)
    assert trainer.callback_metrics["val_acc"] > 0.85  # read before test, which starts without the fit's (Lightning's)
    (result,) = trainer.test(model, datamodule=dm, verbose=False)
    assert result["test_acc"] >= 0.90

    # Recount: the logged epoch accuracy must equal correct / total over the whole test set,
    # although the last batch is smaller than the others.
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in dm.test_dataloader():
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    assert len(dm.test_set) % 16 != 0
    assert result["test_acc"] == pytest.approx(correct / total, abs=1e-7)


def test_trainer_fit_matches_a_plain_pytorch_loop_bit_for_bit():
    train, _ = loaders(shuffle=False)
    tm.seed_everything(3)
    model = DropoutNet()
    quiet_trainer(max_epochs=2).fit(model, train)

    tm.seed_everything(3)
    reference = DropoutNet()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.7)
    for _ in range(2):
        for x, y in train:
            loss = F.cross_entropy(reference.net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
    assert torch.equal(flat_weights(model), flat_weights(reference))


class _SGDNet(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_gradient_accumulation_equals_the_larger_batch():
    data = random_classification(64)
    torch.manual_seed(0)
    accumulated = _SGDNet()
    quiet_trainer(max_epochs=1, accumulate_grad_batches=4).fit(accumulated, DataLoader(data, batch_size=4))
    torch.manual_seed(0)
    large = _SGDNet()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(large, DataLoader(data, batch_size=16))
    assert trainer.global_step == 4
    torch.testing.assert_close(flat_weights(accumulated), flat_weights(large), rtol=0, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_gradient_clipping_matches_torch_utilities(algorithm):
    data = DataLoader(random_classification(32), batch_size=32)
    torch.manual_seed(0)
    model = _SGDNet()
    quiet_trainer(max_steps=1, gradient_clip_val=0.05, gradient_clip_algorithm=algorithm).fit(model, data)
    torch.manual_seed(0)
    reference = _SGDNet()
    x, y = next(iter(data))
    F.cross_entropy(reference.layer(x), y).backward()
    if algorithm == "norm":
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    else:
        torch.nn.utils.clip_grad_value_(reference.parameters(), 0.05)
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    assert torch.equal(flat_weights(model), flat_weights(reference))


@pytest.mark.parametrize(("interval", "expected_steps"), [("step", 24), ("epoch", 2)])
def test_lr_scheduler_steps_per_configured_interval(interval, expected_steps):
    train, _ = loaders()
    model = DropoutNet(scheduler_interval=interval)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, train)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == expected_steps
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.05 * 0.7 ** (expected_steps // 7))


def test_limits_val_check_interval_and_max_steps():
    train, val = loaders()

    model = ValidationCounting()
    trainer = quiet_trainer(
        max_epochs=3, limit_train_batches=6, limit_val_batches=2, val_check_interval=3, num_sanity_val_steps=1
    )
    trainer.fit(model, train, val)
    assert trainer.global_step == 18
    # One sanity batch, then two validations of two batches per epoch.
    assert model.val_batches == 1 + 3 * 2 * 2
    trainer = quiet_trainer(max_steps=5, max_epochs=10)
    trainer.fit(DropoutNet(), train)
    assert trainer.global_step == 5 and trainer.current_epoch == 1


def test_the_sanity_check_runs_no_more_batches_than_limit_val_batches():
    train, val = loaders()

    model = ValidationCounting()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=2)
    trainer.fit(model, train, val)
    assert model.val_batches == 1 + 1  # as Lightning: min(num_sanity_val_steps, limit_val_batches), then one validation


def test_fast_dev_run_runs_one_batch_of_each_stage():
    train, val = loaders()
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(DropoutNet(), train, val)
    assert trainer.global_step == 1
    assert trainer.loggers == []


def test_epoch_value_is_the_batch_size_weighted_mean():
    class LogsBatchMean(DropoutNet):
        def validation_step(self, batch, batch_idx):
            self.log("x_mean", batch[0][:, 0].mean())

    data = random_classification(20)
    trainer = quiet_trainer(max_epochs=1)
    (result,) = trainer.validate(LogsBatchMean(), DataLoader(data, batch_size=8), verbose=False)  # 8, 8, 4
    assert result["x_mean"] == pytest.approx(float(data.tensors[0][:, 0].double().mean()), abs=1e-7)


class _Stream(torch.utils.data.IterableDataset):
    """Five batches' worth of samples, and no length."""

    def __iter__(self):
        yield from zip(*random_classification(40).tensors)


def test_accumulation_remainder_steps_at_the_end_of_an_epoch_without_length():
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=2)
    trainer.fit(_SGDNet(), DataLoader(_Stream(), batch_size=8))
    assert trainer.global_step == 6  # 5 batches: steps after 2, 4 and the leftover 5th, per epoch


def test_logging_step_and_epoch_values():
    train, val = loaders(shuffle=False)
    model = DropoutNet()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, train, val)
    metrics = trainer.callback_metrics
    assert {"train_loss_step", "train_loss_epoch", "train_loss", "val_loss"} <= set(metrics)
    assert metrics["train_loss"] == metrics["train_loss_epoch"]
    # Scalar tensors, as in Lightning (programs call .item() on them).
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and math.isfinite(v.item()) for v in metrics.values())


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true", "16-mixed"])
def test_reduced_precisions_train_on_cpu(precision):
    train, _ = loaders()

    class Probe(DropoutNet):
        def training_step(self, batch, batch_idx):
            x, y = batch
            self.seen_dtype = self.net(x).dtype
            return super().training_step(batch, batch_idx)

    model = Probe()
    before = flat_weights(model).clone()
    trainer = quiet_trainer(max_epochs=1, **(fp16_on_cpu() if precision == "16-mixed" else {"precision": precision}))
    trainer.fit(model, train)
    expected = torch.float16 if precision == "16-mixed" else torch.bfloat16
    assert model.seen_dtype == expected
    assert not torch.equal(flat_weights(model).float(), before)


class _StepCalls(tm.Callback):
    """Records every Python function called between the ends of batches 2 and 6 (four whole steps)."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self.batches: list[int] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batches.append(batch_idx)
        if batch_idx == 2:
            sys.setprofile(self._record)
        elif batch_idx == 6:
            sys.setprofile(None)

    def _record(self, frame, event, arg):
        if event == "call":
            self.calls.append((frame.f_code.co_filename, frame.f_code.co_name))


def test_a_step_looks_up_no_hook_and_enters_no_context_where_nobody_overrides_one():
    # The no-override fast path (benchmarks/loop_cpu.py): who defines which hook is read once per
    # epoch, so a step calls no dispatcher lookup; in full precision on one device it enters no
    # context manager (autocast, no_sync: nullcontexts) either.
    class Plain(tm.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    recorder = _StepCalls()
    train, _ = loaders()
    quiet_trainer(max_epochs=1, limit_train_batches=8, log_every_n_steps=50, callbacks=[recorder]).fit(Plain(), train)
    assert recorder.batches == list(range(8))
    names = {(os.path.basename(file), name) for file, name in recorder.calls}
    assert ("test_fit_loop.py", "on_train_batch_end") in names  # the profile saw the steps
    assert ("automatic_optimization.py", "run") in names
    lookups = {n for n in names if n[0] == "hooks.py"}
    assert lookups == set(), lookups
    contexts = {n for n in names if n[0] == "contextlib.py"}
    assert contexts == set(), contexts
