"""Lightning's backward, optimizer_zero_grad, lr_scheduler_step and configure_gradient_clipping hooks
and ``self.clip_gradients``: an override replaces the call where Lightning makes it (each checked
against the same training in plain torch), and clipping reaches only the given optimizer's parameters."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))

from optimizer_step_run import SAMPLES, Net, network  # noqa: E402

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer, random_classification  # noqa: E402
from trainmesh.trainer.hooks import HookDispatcher  # noqa: E402
from trainmesh.utilities.exceptions import MisconfigurationException  # noqa: E402

EPOCHS = 2


def loader(batch_size=8):
    return DataLoader(random_classification(SAMPLES), batch_size=batch_size)


def assert_same_weights(module, reference):
    for got, want in zip(module.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=0)


def plain_sgd(*, accumulate=1, zero_when=None, loss_factor=1.0, clip=None, lr_at=lambda step: 0.2):
    """Plain torch SGD over the same batches: zero at a window's first batch (``zero_when(batch_idx)``
    where given), backward of ``loss_factor * loss / accumulate``, ``clip(model)``, step, lr per step."""
    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr_at(0), momentum=0.9)
    step = 0
    for _ in range(EPOCHS):
        for batch_idx, (x, y) in enumerate(loader()):
            if (zero_when or (lambda i: i % accumulate == 0))(batch_idx):
                optimizer.zero_grad()
            (loss_factor * (F.cross_entropy(model(x), y) / accumulate)).backward()
            if (batch_idx + 1) % accumulate == 0:
                if clip is not None:
                    clip(model)
                optimizer.step()
                step += 1
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step)
    return model


class TripledBackward(Net):
    def backward(self, loss, *args, **kwargs):
        self.seen = [*getattr(self, "seen", []), loss.detach()]
        (3 * loss).backward(*args, **kwargs)


def test_a_backward_override_replaces_the_loops_backward():
    module = TripledBackward()
    quiet_trainer(max_epochs=EPOCHS, accumulate_grad_batches=2).fit(module, loader())
    assert len(module.seen) == EPOCHS * 12  # every batch, accumulation batches included
    assert_same_weights(module, plain_sgd(accumulate=2, loss_factor=3.0))


class ManualTwice(Net):
    """manual_backward goes through the module's backward, with loss.backward's arguments."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.backward_calls = []

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        loss = F.cross_entropy(self.net(batch[0]), batch[1])
        optimizer.zero_grad()
        self.manual_backward(loss, retain_graph=True)  # the graph is kept for a second backward
        self.manual_backward(loss)
        optimizer.step()

    def backward(self, loss, *args, **kwargs):
        self.backward_calls.append(kwargs)
        loss.backward(*args, **kwargs)


def test_manual_backward_runs_the_module_backward_with_its_arguments():
    module = ManualTwice()
    quiet_trainer(max_epochs=EPOCHS).fit(module, loader())
    assert module.backward_calls == [{"retain_graph": True}, {}] * (EPOCHS * 12)
    assert_same_weights(module, plain_sgd(loss_factor=2.0))  # two backward passes add up


class ZeroEveryOtherWindow(Net):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.seen = [*getattr(self, "seen", []), (epoch, batch_idx, type(optimizer))]
        if batch_idx % 4 == 0:
            optimizer.zero_grad()


def test_an_optimizer_zero_grad_override_is_called_at_each_windows_first_batch_and_replaces_zero_grad():
    module = ZeroEveryOtherWindow()
    quiet_trainer(max_epochs=EPOCHS, accumulate_grad_batches=2).fit(module, loader())
    assert module.seen == [(epoch, i, torch.optim.SGD) for epoch in range(EPOCHS) for i in range(0, 12, 2)]
    # gradients zeroed every other window only: the other windows add to the previous ones
    assert_same_weights(module, plain_sgd(accumulate=2, zero_when=lambda i: i % 4 == 0))


class HalvingSchedule:
    """Not a torch scheduler, and no step(): only an lr_scheduler_step override can step it."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def halve(self):
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.5

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class CustomSchedules(Net):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)
        every_3 = {"scheduler": HalvingSchedule(optimizer), "interval": "step", "frequency": 3, "name": "steps"}
        watched = {"scheduler": HalvingSchedule(optimizer), "reduce_on_plateau": True, "monitor": "train_loss"}
        return [optimizer], [every_3, watched]

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss

    def lr_scheduler_step(self, scheduler, metric):
        self.seen = [*getattr(self, "seen", []), (self.trainer.global_step, metric is not None)]
        scheduler.halve()


def test_lr_scheduler_step_steps_a_scheduler_that_is_not_torchs_at_each_interval_and_frequency():
    module = CustomSchedules()
    quiet_trainer(max_epochs=EPOCHS, log_every_n_steps=1).fit(module, loader())
    every_3 = [(step, False) for step in range(3, 25, 3)]  # the step schedule: no metric
    assert module.seen == [*every_3[:4], (12, True), *every_3[4:], (24, True)]  # the epoch's: the monitored loss
    # (the epoch schedule's halving comes after the epoch's last step: it changes no step of the first epoch)
    halvings = {step: 2 ** -sum(1 for s, _ in module.seen if s <= step) for step in range(25)}
    assert_same_weights(module, plain_sgd(lr_at=lambda step: 0.2 * halvings[step]))


class StatelessSchedule(HalvingSchedule):
    state_dict = None  # a checkpoint could not save it


def _scheduled(schedule, *, overridden):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": schedule(optimizer)}

    return type(
        "Scheduled", (CustomSchedules if overridden else Net,), {"configure_optimizers": configure_optimizers}
    )()


@pytest.mark.parametrize(
    "schedule, overridden, error",
    [
        (
            HalvingSchedule,
            False,
            r"HalvingSchedule` doesn't follow PyTorch's LRScheduler API.*lr_scheduler_step",
        ),
        (StatelessSchedule, True, r"StatelessSchedule` is invalid. It should have `state_dict` and `load_state_dict`"),
    ],
)
def test_a_scheduler_the_run_could_not_step_or_save_is_refused(schedule, overridden, error):
    # Lightning's types: MisconfigurationException for a scheduler it cannot step, TypeError for one it cannot save
    with pytest.raises((MisconfigurationException, TypeError), match=error):
        quiet_trainer(max_epochs=1).fit(_scheduled(schedule, overridden=overridden), loader())


class ClipsEveryOtherStep(Net):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.seen = [*getattr(self, "seen", []), (type(optimizer), gradient_clip_val, gradient_clip_algorithm)]
        if self.trainer.global_step % 2 == 0:
            self.clip_gradients(optimizer, gradient_clip_val=0.05, gradient_clip_algorithm="value")


def test_configure_gradient_clipping_gets_the_trainers_settings_and_replaces_the_clipping():
    module = ClipsEveryOtherStep()
    quiet_trainer(max_epochs=EPOCHS).fit(module, loader())
    assert module.seen == [(torch.optim.SGD, None, None)] * (EPOCHS * 12)  # Lightning passes the Trainer's: unset
    clipped = {"steps": 0}

    def clip_on_even_steps(model):
        if clipped["steps"] % 2 == 0:
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
        clipped["steps"] += 1

    assert_same_weights(module, plain_sgd(clip=clip_on_even_steps))
    module = type("Records", (ClipsEveryOtherStep,), {"clip_gradients": lambda self, *args, **kwargs: None})()
    quiet_trainer(max_steps=1, gradient_clip_val=0.5, gradient_clip_algorithm="Norm").fit(module, loader())
    assert module.seen == [(torch.optim.SGD, 0.5, "norm")]


def test_clip_gradients_with_another_value_than_the_trainers_is_refused_as_in_lightning():
    with pytest.raises(
        ValueError, match=r"clip_gradients\(gradient_clip_val=0.05\) with Trainer\(gradient_clip_val=0.5"
    ):
        quiet_trainer(max_steps=1, gradient_clip_val=0.5).fit(ClipsEveryOtherStep(), loader())


class ClipsOneOptimizer(Net):
    """Two optimizers in manual optimization; only the first one's gradients are clipped."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def configure_optimizers(self):
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.2), torch.optim.SGD(self.net[2].parameters(), lr=0.2)]

    def training_step(self, batch, batch_idx):
        first, second = self.optimizers()
        first.zero_grad()
        second.zero_grad()
        self.manual_backward(F.cross_entropy(self.net(batch[0]), batch[1]))
        self.clip_gradients(first, gradient_clip_val=1e-3, gradient_clip_algorithm="norm")
        first.step()
        second.step()


def test_clip_gradients_clips_only_that_optimizers_parameters():
    module = ClipsOneOptimizer()
    quiet_trainer(max_epochs=1).fit(module, loader())
    model = network()
    first, second = torch.optim.SGD(model[0].parameters(), lr=0.2), torch.optim.SGD(model[2].parameters(), lr=0.2)
    for x, y in loader():
        first.zero_grad()
        second.zero_grad()
        F.cross_entropy(model(x), y).backward()
        norm = torch.nn.utils.clip_grad_norm_(model[0].parameters(), 1e-3)
        assert norm > 1e-2  # clipping changes something: the test would see the whole model's norm
        first.step()
        second.step()
    assert_same_weights(module, model)


def test_pipeline_refuses_a_backward_override_at_fit_start():
    """A pipeline's schedule runs backward itself: the module's backward would never run."""
    from trainmesh.strategies.mesh import ParallelDims
    from trainmesh.strategies.model_parallel_support import model_parallel_capabilities
    from trainmesh.trainer.optimization_hooks import refuse_uncallable_step_hooks

    module = TripledBackward()
    dims = ParallelDims(pp=2, dp_shard=1).resolved(2)
    runtime = SimpleNamespace(
        mesh=SimpleNamespace(dims=dims), capabilities=model_parallel_capabilities(dims, replicated=False)
    )
    hooks = HookDispatcher(SimpleNamespace(module=module, runtime=runtime), module, [tm.Callback()])
    with pytest.raises(ValueError, match=r"backward \(defined by TripledBackward\) cannot run under pipeline"):
        refuse_uncallable_step_hooks(hooks, module, runtime, manual=False)
