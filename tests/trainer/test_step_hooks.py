"""Lightning's hooks around backward, the optimizer step and zero_grad, and evaluation's batch-start
hooks: when each runs, in what order, with what (trainmesh.trainer.optimization_hooks)."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import fp16_on_cpu, quiet_trainer, random_classification
from trainmesh.trainer.hooks import HookDispatcher

CLIP = 1e-3  # far below these models' gradient norms: every step clips


def grad_norm(module):
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters() if p.grad is not None]))


def train_loader(batches, batch_size=8):
    return DataLoader(random_classification(batches * batch_size), batch_size=batch_size)


class StepRecorder(tm.Callback):
    def __init__(self):
        self.calls = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.calls.append(f"cb.train_batch_start:{batch_idx}")

    def on_before_backward(self, trainer, module, loss):
        self.calls.append("cb.before_backward")

    def on_after_backward(self, trainer, module):
        self.calls.append("cb.after_backward")

    def on_before_optimizer_step(self, trainer, module, optimizer):
        self.calls.append("cb.before_optimizer_step")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.calls.append(f"cb.train_batch_end:{batch_idx}")


class ZeroGradRecorder(StepRecorder):
    def on_before_zero_grad(self, trainer, module, optimizer):
        self.calls.append("cb.before_zero_grad")


class Recorded(tm.Module):
    """Writes every step hook into ``calls`` (shared with a StepRecorder), with what it saw."""

    def __init__(self, calls):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(16, 4)
        self.calls = calls
        self.losses, self.seen = [], {}

    def training_step(self, batch, batch_idx):
        self.calls.append(f"training_step:{batch_idx}")
        loss = F.cross_entropy(self.layer(batch[0]), batch[1])
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._stepping())
        return optimizer

    def _stepping(self):
        self.calls.append("optimizer.step")
        self.seen.setdefault("step_norms", []).append(grad_norm(self).item())

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(f"train_batch_start:{batch_idx}")

    def on_before_backward(self, loss):
        self.calls.append("before_backward")
        self.seen.setdefault("backward_losses", []).append(loss.detach())

    def on_after_backward(self):
        self.calls.append("after_backward")

    def on_before_optimizer_step(self, optimizer):
        self.calls.append("before_optimizer_step")
        self.seen.setdefault("hook_norms", []).append(grad_norm(self).item())
        self.seen["optimizer"] = optimizer

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(f"train_batch_end:{batch_idx}")


class ZeroGradRecorded(Recorded):
    def on_before_zero_grad(self, optimizer):
        self.calls.append("before_zero_grad")
        self.seen.setdefault("zero_grad_has_grads", []).append(all(p.grad is not None for p in self.parameters()))


def test_automatic_optimization_hook_order_with_accumulation():
    callback = ZeroGradRecorder()
    module = ZeroGradRecorded(callback.calls)
    quiet_trainer(max_epochs=1, accumulate_grad_batches=2, gradient_clip_val=CLIP, callbacks=[callback]).fit(
        module, train_loader(5)
    )
    expected = []
    for batch_idx in range(5):
        expected += [
            f"cb.train_batch_start:{batch_idx}",
            f"train_batch_start:{batch_idx}",
            f"training_step:{batch_idx}",
        ]
        if batch_idx in (0, 2, 4):  # each window's first batch: Lightning zeroes after training_step, before backward
            expected += ["cb.before_zero_grad", "before_zero_grad"]
        expected += ["cb.before_backward", "before_backward", "cb.after_backward", "after_backward"]
        if batch_idx in (1, 3, 4):  # each window's last batch, and the epoch's last (a window of one)
            expected += ["cb.before_optimizer_step", "before_optimizer_step", "optimizer.step"]
        expected += [f"cb.train_batch_end:{batch_idx}", f"train_batch_end:{batch_idx}"]
    assert callback.calls == expected
    # on_before_backward gets the loss backward runs on: divided by the accumulation window.
    torch.testing.assert_close(torch.stack(module.seen["backward_losses"]), torch.stack(module.losses) / 2)
    # on_before_optimizer_step sees the gradients before clipping; the step after it, clipped ones.
    assert all(norm > 10 * CLIP for norm in module.seen["hook_norms"])
    assert all(norm <= CLIP * 1.001 for norm in module.seen["step_norms"])
    assert isinstance(module.seen["optimizer"], torch.optim.SGD)  # the torch optimizer, as in Lightning
    # before the gradients are zeroed: the previous window's (none before the first step)
    assert module.seen["zero_grad_has_grads"] == [False, True, True]


class ManualRecorded(Recorded):
    """Batch 0 steps plainly, batch 1 with a closure that runs the backward."""

    def __init__(self, calls):
        super().__init__(calls)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def closure():
            opt.zero_grad()
            loss = super(ManualRecorded, self).training_step(batch, batch_idx)
            self.manual_backward(loss)
            return loss

        if batch_idx == 0:
            loss = closure()
            self.calls.append("step_called")
            opt.step()
        else:
            self.calls.append("step_called")
            loss = opt.step(closure)
        return loss


def test_manual_optimization_hooks():
    callback = StepRecorder()
    module = ManualRecorded(callback.calls)
    quiet_trainer(max_epochs=1, callbacks=[callback]).fit(module, train_loader(2))
    # Callbacks before the module, as Lightning calls them (trainer/hooks.py).
    backward = ["cb.before_backward", "before_backward", "cb.after_backward", "after_backward"]
    step = ["cb.before_optimizer_step", "before_optimizer_step", "optimizer.step"]
    assert callback.calls == [
        "cb.train_batch_start:0",
        "train_batch_start:0",
        "training_step:0",
        *backward,
        "step_called",
        *step,
        "cb.train_batch_end:0",
        "train_batch_end:0",
        # opt.step(closure): torch's step calls the closure (after its pre-hooks), and the hook runs once the
        # closure has run its backward, as Lightning's Precision._wrap_closure does
        "cb.train_batch_start:1",
        "train_batch_start:1",
        "step_called",
        "optimizer.step",
        "training_step:1",
        *backward,
        "cb.before_optimizer_step",
        "before_optimizer_step",
        "cb.train_batch_end:1",
        "train_batch_end:1",
    ]
    assert all(norm > 0 for norm in module.seen["hook_norms"])  # the step's gradients exist at the hook


class ManualWithZeroGradHook(ManualRecorded):
    on_before_zero_grad = ZeroGradRecorded.on_before_zero_grad


@pytest.mark.parametrize("owner", ["module", "callback"])
def test_manual_optimization_warns_that_on_before_zero_grad_is_not_called(owner):
    """Lightning's opt.zero_grad() calls no hook in manual optimization: neither does trainmesh, and it says so."""
    if owner == "module":
        module, callback, name = ManualWithZeroGradHook([]), StepRecorder(), "ManualWithZeroGradHook"
    else:
        module, callback, name = ManualRecorded([]), ZeroGradRecorder(), "ZeroGradRecorder"
    with pytest.warns(
        UserWarning, match=rf"on_before_zero_grad \(defined by {name}\) is not called.*manual optimization"
    ):
        quiet_trainer(max_epochs=1, callbacks=[callback]).fit(module, train_loader(2))
    assert "before_zero_grad" not in callback.calls + module.calls and "cb.before_zero_grad" not in callback.calls


class EMAModule(tm.Module):
    """Keeps an exponential moving average of its weights in on_before_zero_grad (before each window's
    backward: the weights of the step before)."""

    DECAY = 0.9

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(16, 4)
        self.ema = [p.detach().clone() for p in self.layer.parameters()]

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def on_before_zero_grad(self, optimizer):
        with torch.no_grad():
            for average, weight in zip(self.ema, self.layer.parameters()):
                average.mul_(self.DECAY).add_(weight, alpha=1 - self.DECAY)


def test_ema_in_on_before_zero_grad_matches_a_hand_computation():
    module = EMAModule()
    quiet_trainer(max_epochs=2).fit(module, train_loader(4))
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    ema = [p.detach().clone() for p in layer.parameters()]
    for _ in range(2):
        for x, y in train_loader(4):
            # Lightning's order: training_step, on_before_zero_grad, zero_grad, backward, step
            loss = F.cross_entropy(layer(x), y)
            for average, weight in zip(ema, layer.parameters()):
                average.mul_(EMAModule.DECAY).add_(weight.detach(), alpha=1 - EMAModule.DECAY)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for got, want in zip(module.ema, ema):
        torch.testing.assert_close(got, want)
    assert not torch.equal(module.ema[0], module.layer.weight.detach())  # an average, not the weights


class ScaledNorms(tm.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(16, 4)
        self.after_backward, self.before_step, self.scales = [], [], []

    def training_step(self, batch, batch_idx):
        # small, so that 16-mixed's scaled gradients stay finite in float16
        return F.cross_entropy(self.layer(batch[0]), batch[1]) * 1e-3

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_after_backward(self):
        self.after_backward.append(grad_norm(self))
        self.scales.append(self.trainer.runtime.precision.scaler.get_scale())

    def on_before_optimizer_step(self, optimizer):
        self.before_step.append(grad_norm(self))


@pytest.mark.parametrize("clip", [None, 1e6])
def test_16_mixed_gradients_are_unscaled_for_on_before_optimizer_step(clip):
    """As in Lightning: on_after_backward sees scaled gradients, on_before_optimizer_step unscaled
    ones; clipping after the hook does not unscale them a second time (GradScaler would refuse)."""
    module = ScaledNorms()
    quiet_trainer(max_epochs=1, gradient_clip_val=clip, **fp16_on_cpu()).fit(module, train_loader(3))
    assert len(module.after_backward) == len(module.before_step) == 3
    for scaled, unscaled, scale in zip(module.after_backward, module.before_step, module.scales):
        assert scale > 1
        torch.testing.assert_close(scaled / scale, unscaled)


class EvalRecorder(tm.Callback):
    def __init__(self, calls):
        self.calls = calls

    def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        self.calls.append(("cb.validation_batch_start", batch_idx, dataloader_idx))

    def on_test_batch_start(self, trainer, module, batch, batch_idx):  # no dataloader_idx: one loader
        self.calls.append(("cb.test_batch_start", batch_idx))

    def on_predict_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        self.calls.append(("cb.predict_batch_start", batch_idx, dataloader_idx))


class EvalRecorded(tm.Module):
    def __init__(self, calls):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.calls = calls

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.calls.append(("validation_step", batch_idx, dataloader_idx))

    def test_step(self, batch, batch_idx):
        self.calls.append(("test_step", batch_idx))

    def predict_step(self, batch, batch_idx):
        self.calls.append(("predict_step", batch_idx))
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        assert batch[0].shape == (8, 16)
        self.calls.append(("validation_batch_start", batch_idx, dataloader_idx))

    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        self.calls.append(("validation_batch_end", batch_idx, dataloader_idx))

    def on_test_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self.calls.append(("test_batch_start", batch_idx, dataloader_idx))

    def on_predict_batch_start(self, batch, batch_idx):  # fewer arguments: gets the leading ones
        self.calls.append(("predict_batch_start", batch_idx))


def test_evaluation_batch_start_hooks():
    calls = []
    module, callback = EvalRecorded(calls), EvalRecorder(calls)
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=1, callbacks=[callback])
    trainer.fit(module, train_loader(1), train_loader(2))

    def one_batch(i, loader=0):
        return [
            ("cb.validation_batch_start", i, loader),
            ("validation_batch_start", i, loader),
            ("validation_step", i, loader),
            ("validation_batch_end", i, loader),
        ]

    assert calls == [*one_batch(0), *one_batch(0), *one_batch(1)]  # the sanity check's batch, then validation
    calls.clear()
    trainer.validate(module, [train_loader(1), train_loader(1)])  # two loaders: dataloader_idx is passed
    assert calls == [*one_batch(0, 0), *one_batch(0, 1)]
    calls.clear()
    trainer.test(module, train_loader(2))
    assert calls == [
        ("cb.test_batch_start", 0),
        ("test_batch_start", 0, 0),
        ("test_step", 0),
        ("cb.test_batch_start", 1),
        ("test_batch_start", 1, 0),
        ("test_step", 1),
    ]
    calls.clear()
    # two loaders and steps without dataloader_idx: Lightning 2.6's RuntimeError, before any batch
    with pytest.raises(RuntimeError, match="multiple `predict_dataloader`, but no `dataloader_idx`"):
        trainer.predict(module, [train_loader(1), train_loader(1)])
    assert calls == []
    trainer.predict(module, train_loader(1))
    assert calls == [("cb.predict_batch_start", 0, 0), ("predict_batch_start", 0), ("predict_step", 0)]


@pytest.mark.parametrize("hook", ["on_before_backward", "on_after_backward"])
def test_pipeline_refuses_backward_hooks_at_fit_start(hook):
    """A pipeline's schedule runs backward per micro-batch and stage: the hooks cannot run as
    Lightning's do, so fit refuses them instead of skipping them."""
    from trainmesh.strategies.mesh import ParallelDims
    from trainmesh.strategies.model_parallel_support import model_parallel_capabilities
    from trainmesh.trainer.optimization_hooks import refuse_uncallable_step_hooks

    module = type("WithHook", (tm.Module,), {hook: lambda self, *args: None})()

    def runtime(pp):
        dims = ParallelDims(pp=pp, dp_shard=1).resolved(pp)
        return SimpleNamespace(
            mesh=SimpleNamespace(dims=dims), capabilities=model_parallel_capabilities(dims, replicated=False)
        )

    trainer = SimpleNamespace(module=module, runtime=runtime(2))
    callback = type("HookCallback", (tm.Callback,), {hook: lambda self, *args: None})()
    trainer.hooks = HookDispatcher(trainer, module, [callback])
    with pytest.raises(ValueError, match=rf"{hook} \(defined by WithHook and HookCallback\).*pipeline parallelism"):
        refuse_uncallable_step_hooks(trainer.hooks, module, trainer.runtime, manual=False)
    trainer.runtime = runtime(1)
    refuse_uncallable_step_hooks(
        trainer.hooks, module, trainer.runtime, manual=False
    )  # without stages they run (tests above)
