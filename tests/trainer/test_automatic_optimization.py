"""Lightning's optimizer_step hook and the hooks of the step around it (trainmesh.trainer.automatic_optimization):
called where Lightning 2.6.6 calls them, with its arguments; a warm-up or a skipped step written in the hook
trains the weights that the same schedule in plain torch does, under single, ddp and fsdp."""

import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from optimizer_step_run import (  # noqa: E402
    ACCUMULATE,
    CLIP,
    EPOCHS,
    SAMPLES,
    Net,
    WarmUp,
    network,
    sgd,
    torch_reference,
)

import trainmesh as tm  # noqa: E402
from helpers.batches import Batches  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.models import fp16_on_cpu, quiet_trainer, random_classification  # noqa: E402
from helpers.programs import differences, run_both, trainer_kwargs  # noqa: E402

SCRIPT = HERE / "optimizer_step_run.py"


def loader(batch_size=8, samples=SAMPLES):
    return DataLoader(random_classification(samples), batch_size=batch_size)


def assert_same_weights(module, reference, atol=0.0):
    for got, want in zip(module.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=atol)


class HalvingSchedule:
    """A scheduler that is not torch's (no step()): Lightning steps it only through lr_scheduler_step."""

    def __init__(self, optimizer):
        self.optimizer, self.count = optimizer, 0

    def halve(self):
        self.count += 1
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.5

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class EveryHook(tm.Module):
    """Overrides each hook of the step and writes what it was called with into ``calls``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(16, 4)
        self.calls = []

    def training_step(self, batch, batch_idx):
        self.calls.append(f"training_step:{batch_idx}")
        return F.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        optimizer.register_step_pre_hook(lambda *args: self.calls.append("torch_step"))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": HalvingSchedule(optimizer), "interval": "step"}}

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(f"on_train_batch_start:{batch_idx}")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(f"on_train_batch_end:{batch_idx}")

    def on_before_backward(self, loss):
        self.calls.append("on_before_backward")

    def backward(self, loss, *args, **kwargs):
        self.calls.append("backward")
        loss.backward(*args, **kwargs)

    def on_after_backward(self):
        self.calls.append("on_after_backward")

    def on_before_optimizer_step(self, optimizer):
        self.calls.append(f"on_before_optimizer_step:{type(optimizer).__name__}")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.calls.append(f"configure_gradient_clipping:{type(optimizer).__name__}:{gradient_clip_val}")
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        self.calls.append(f"optimizer_step:{epoch}:{batch_idx}")
        optimizer.step(closure=optimizer_closure)
        self.calls.append("optimizer_step_done")

    def on_before_zero_grad(self, optimizer):
        self.calls.append(f"on_before_zero_grad:{type(optimizer).__name__}")

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.calls.append(f"optimizer_zero_grad:{epoch}:{batch_idx}:{type(optimizer).__name__}")
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler, metric):
        self.calls.append(f"lr_scheduler_step:{type(scheduler).__name__}:{metric}")
        scheduler.halve()

    def on_train_epoch_end(self):
        self.calls.append("on_train_epoch_end")


def _window_start(i):
    return ["on_before_zero_grad:SGD", f"optimizer_zero_grad:0:{i}:SGD"]


_BACKWARD = ["on_before_backward", "backward", "on_after_backward"]
_AFTER_CLOSURE = ["on_before_optimizer_step:SGD", "configure_gradient_clipping:SGD:0.5"]
_STEPPED = ["optimizer_step_done", "lr_scheduler_step:HalvingSchedule:None"]

# EveryHook under Lightning 2.6.6 (the same class on a LightningModule, Trainer(accumulate_grad_batches=2,
# gradient_clip_val=0.5), 5 batches of 8): the calls it printed, and its weights' sum.
LIGHTNING_ORDER = [
    *["on_train_batch_start:0", "training_step:0", *_window_start(0), *_BACKWARD, "on_train_batch_end:0"],
    *["on_train_batch_start:1", "optimizer_step:0:1", "torch_step", "training_step:1", *_BACKWARD],
    *[*_AFTER_CLOSURE, *_STEPPED, "on_train_batch_end:1"],
    *["on_train_batch_start:2", "training_step:2", *_window_start(2), *_BACKWARD, "on_train_batch_end:2"],
    *["on_train_batch_start:3", "optimizer_step:0:3", "torch_step", "training_step:3", *_BACKWARD],
    *[*_AFTER_CLOSURE, *_STEPPED, "on_train_batch_end:3"],
    *["on_train_batch_start:4", "optimizer_step:0:4", "torch_step", "training_step:4", *_window_start(4)],
    *[*_BACKWARD, *_AFTER_CLOSURE, *_STEPPED, "on_train_batch_end:4", "on_train_epoch_end"],
]
LIGHTNING_WEIGHT_SUM = -0.9516339302062988


def test_the_step_hooks_run_in_lightnings_order_and_train_lightnings_weights():
    module = EveryHook()
    quiet_trainer(max_epochs=1, accumulate_grad_batches=2, gradient_clip_val=0.5).fit(module, loader(samples=40))
    assert module.calls == LIGHTNING_ORDER
    assert module.layer.weight.sum().item() == pytest.approx(LIGHTNING_WEIGHT_SUM, rel=1e-6)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_warm_up_in_optimizer_step_trains_what_plain_torch_does(accumulate):
    module = WarmUp()
    trainer = quiet_trainer(max_epochs=EPOCHS, accumulate_grad_batches=accumulate)
    trainer.fit(module, loader())
    assert trainer.global_step == EPOCHS * 12 // accumulate
    assert_same_weights(module, torch_reference(batch_size=8, accumulate=accumulate))
    assert module.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.2)  # warmed up to the full rate


class SkipsSteps(Net):
    """Calls the closure itself (training_step and backward) on the batches it does not step."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        if batch_idx % 3 == 1:
            loss = optimizer_closure()
            assert loss is not None and not loss.requires_grad
        else:
            optimizer.step(closure=optimizer_closure)


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_a_step_skipped_in_optimizer_step_trains_what_plain_torch_does(precision):
    module = SkipsSteps()
    fp16 = fp16_on_cpu() if precision == "16-mixed" else {"precision": precision}
    trainer = quiet_trainer(max_epochs=EPOCHS, accumulate_grad_batches=2, **fp16)
    trainer.fit(module, loader())
    assert trainer.global_step == EPOCHS * 6  # a skipped step still counts, as in Lightning
    if precision == "32-true":
        reference = torch_reference(batch_size=8, accumulate=2, skip=lambda i: i % 3 == 1, warm=False)
        assert_same_weights(module, reference)
    else:  # with a grad scaler: no unscale is left over from a skipped step (GradScaler would refuse the next)
        assert_same_weights(module, _grad_scaler_reference(skip=lambda i: i % 3 == 1), atol=1e-6)


def _grad_scaler_reference(skip):
    """Plain torch 16-mixed on the CPU (fp16 autocast, GradScaler), accumulating 2 batches; no warm-up."""
    model = network()
    optimizer, scaler = sgd(model.parameters()), torch.amp.GradScaler("cpu")
    for _ in range(EPOCHS):
        for batch_idx, (x, y) in enumerate(loader()):
            if batch_idx % 2 == 0:
                optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss / 2).backward()
            if batch_idx % 2 == 1 and not skip(batch_idx):
                scaler.step(optimizer)
                scaler.update()
    return model


class NeverRunsTheClosure(Net):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        if self.how == "step without it":
            optimizer.step()


@pytest.mark.parametrize("how", ["nothing", "step without it"])
def test_an_optimizer_step_that_never_runs_the_closure_stops_the_fit(how):
    trainer = quiet_trainer(max_epochs=1)
    with pytest.raises(
        ValueError, match=r"NeverRunsTheClosure.optimizer_step returned without running optimizer_closure"
    ):
        trainer.fit(NeverRunsTheClosure(how), loader())
    assert trainer.global_step == 1  # Lightning's: the hook's step counted before the check


def closure_never_run_program(L, root):
    class SkipsTheClosure(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            pass

    class Seen(L.pl.Callback):
        def on_exception(self, trainer, module, exception):
            self.step = trainer.global_step

    seen = Seen()
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[seen])
    )
    try:
        trainer.fit(SkipsTheClosure(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    except importlib.import_module(f"{L.pl.__name__}.utilities.exceptions").MisconfigurationException as error:
        words = str(error).startswith(
            "The closure hasn't been executed. HINT: did you call `optimizer_closure()` in your `optimizer_step` hook?"
        )
        # the step the hook took is counted before the check: on_exception and the fit read global_step 1
        return words, seen.step, trainer.global_step
    return "no error"


def test_an_optimizer_step_that_never_runs_the_closure_raises_lightnings_words(tmp_path):
    """Lightning's test_closure.py (and a program) matches "The closure hasn't been executed"."""
    found = run_both(closure_never_run_program, tmp_path)
    assert found["lightning"] == (True, 1, 1)
    assert differences(found["lightning"], found["trainmesh"]) == []


class TwoOptimizers(Net):
    """Several optimizers and a training_step without optimizer_idx: neither Lightning 1.x nor 2.x runs it."""

    def configure_optimizers(self):
        return [sgd(self.net[0].parameters()), sgd(self.net[2].parameters())]


def test_several_optimizers_without_optimizer_idx_are_refused_before_training():
    module = TwoOptimizers()
    before = [p.detach().clone() for p in module.parameters()]
    trainer = quiet_trainer(max_epochs=1)
    with pytest.raises(RuntimeError, match=r"returned 2 optimizers, but training_step takes no optimizer_idx.*manual"):
        trainer.fit(module, loader())
    assert trainer.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


class LBFGSNet(Net):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=3)


def test_lbfgs_steps_through_lightnings_default_optimizer_step():
    """LBFGS needs its closure; Lightning's default optimizer_step passes it (each call zeroes the gradients)."""
    module = LBFGSNet()
    quiet_trainer(max_epochs=1).fit(module, loader())
    model = network()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    for x, y in loader():

        def closure(x=x, y=y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)
    assert_same_weights(module, model)


def test_the_automatic_step_hooks_are_refused_in_manual_optimization():
    class Manual(Net):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            return None

        def lr_scheduler_step(self, scheduler, metric):
            scheduler.step()

    # Lightning calls no lr_scheduler_step in manual optimization and says nothing; trainmesh says so.
    with pytest.warns(UserWarning, match=r"lr_scheduler_step \(defined by Manual\) is not called.*self.lr_schedulers"):
        quiet_trainer(max_epochs=1).fit(Manual(), loader())


@pytest.fixture(scope="module")
def legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("optimizer_step")
    plan = [
        (name, 2, ["trainer", str(root / name), strategy, "2"], {})
        for name, strategy in (("ddp.pt", "ddp"), ("fsdp.pt", "fsdp"))
    ]
    batches = Batches(SCRIPT, root, plan, leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)

    def saved(name: str) -> dict:
        batches(name)
        return torch.load(root / name)

    return saved


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_warm_up_in_optimizer_step_under_two_processes_trains_what_plain_torch_does(legs, strategy):
    """Each process has half of each batch of 16 (accumulated over 2 batches, clipped to a norm of 0.5:
    under fsdp the norm over both shards): the weights of plain torch on the whole batches."""
    saved = legs(f"{strategy}.pt")
    assert saved["global_step"] == EPOCHS * 6 // ACCUMULATE
    # Step k of the global batch: both ranks' k-th batches of 8, as the Trainer's shuffling sampler
    # deals them (seed 0, a new permutation each epoch).
    reference = torch_reference(
        batch_size=16, accumulate=ACCUMULATE, clip=CLIP, sampler=GlobalBatches(SAMPLES, world=2, batch_size=8)
    )
    single = WarmUp()
    order = GlobalBatches(SAMPLES, world=2, batch_size=8)
    quiet_trainer(max_epochs=EPOCHS, accumulate_grad_batches=ACCUMULATE, gradient_clip_val=CLIP).fit(
        single, DataLoader(random_classification(SAMPLES), batch_size=16, sampler=order)
    )
    assert_same_weights(single, reference)  # one process: the same arithmetic
    for (name, got), want in zip(saved["state_dict"].items(), reference.parameters(), strict=True):
        # the mean of two half-batch means, reduced over gloo: equal to float rounding
        torch.testing.assert_close(got, want.detach(), rtol=0, atol=1e-6, msg=name)


class _StepScheduled(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer, self.lrs = torch.nn.Linear(2, 1), []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.lrs.append(round(self.trainer.optimizers[0].param_groups[0]["lr"], 6))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 2}}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_step_schedulers_follow_lightnings_frequency_rule(accumulate):
    """A step-interval scheduler with frequency 2 steps where the epoch's batch count is even, at batches
    that step the optimizer (Lightning's rule, counted per epoch): 5 batches an epoch, 2 epochs. The lists
    are the learning rates Lightning 2.6.6 recorded for the same program."""
    module = _StepScheduled()
    data = DataLoader(TensorDataset(torch.ones(5, 2)), batch_size=1)
    quiet_trainer(max_epochs=2, accumulate_grad_batches=accumulate).fit(module, data)
    assert module.lrs == [1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.0625, 0.0625]


def skipping_the_closure(L, root):
    # Found by repalette's AdversarialSystem (l-progs6 p03): a 1.x optimizer_step that steps one optimizer
    # only every k batches, so the closure does not run; Lightning (1.9.5 and 2.6) stops the fit with
    # MisconfigurationException, which a program catches by that name.
    from helpers.programs import trainer_kwargs

    class SkipsTheClosure(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            if batch_idx % 2:
                optimizer.step(closure=optimizer_closure)

    exceptions = __import__(f"{L.pl.__name__}.utilities.exceptions", fromlist=["MisconfigurationException"])
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    try:
        trainer.fit(SkipsTheClosure(), DataLoader(TensorDataset(torch.ones(8, 4)), batch_size=4))
    except exceptions.MisconfigurationException:
        return {"caught by Lightning's name": True}
    return {"caught by Lightning's name": False}


def test_an_optimizer_step_that_skips_the_closure_raises_lightning_s_exception(tmp_path):
    pytest.importorskip("lightning.pytorch")
    from helpers.programs import differences, run_both

    found = run_both(skipping_the_closure, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
