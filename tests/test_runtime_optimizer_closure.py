"""An optimizer's ``step`` is always given a closure, as Lightning 2.6 gives one (its precision
plugin calls ``optimizer.step(closure=...)``; in manual optimization a closure that does nothing):
an optimizer subclass written as Lightning's CLI docs write it, ``def step(self, closure)``, trains
under trainmesh (it stopped with "missing 1 required positional argument: 'closure'") and trains
Lightning's weights, in automatic and in manual optimization."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


class LitAdam(torch.optim.Adam):
    """Lightning's docs (cli/lightning_cli_intermediate_2.rst): a step that needs its closure."""

    calls: list[str] = []

    def step(self, closure):
        LitAdam.calls.append(type(closure()).__name__)  # what the closure gives: the loss, or nothing
        return super().step()


def closure_program(L, root):
    found = []
    for manual in (False, True):

        class Model(L.pl.LightningModule):
            def __init__(self, manual: bool):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)
                self.automatic_optimization = not manual

            def training_step(self, batch, batch_idx):
                loss = self.layer(batch[0]).pow(2).mean()
                if not self.automatic_optimization:
                    opt = self.optimizers()
                    opt.zero_grad()
                    self.manual_backward(loss)
                    opt.step()
                return loss

            def configure_optimizers(self):
                return LitAdam(self.parameters(), lr=0.1)

        LitAdam.calls = []
        model = Model(manual)
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4))
        found.append((outcome(trainer, model, root), list(LitAdam.calls)))
    return found


def test_an_optimizer_whose_step_needs_a_closure_trains_as_under_lightning(tmp_path):
    found = run_both(closure_program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"][1][1] == ["NoneType"] * 3  # manual: a closure that does nothing


class SharpnessAware(torch.optim.SGD):
    """Sharpness-aware minimisation's shape: its step calls the closure twice, the second time at
    weights it perturbed along the gradient, so that closure must run training_step and backward again
    (Lightning's closure does). Records the order of its step and the module's hooks."""

    events: list = []

    def step(self, closure):
        SharpnessAware.events.append("step")
        loss = closure()
        saved = [p.detach().clone() for group in self.param_groups for p in group["params"]]
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=0.05)
        perturbed = closure()
        SharpnessAware.events.append((round(float(loss), 6), round(float(perturbed), 6)))
        with torch.no_grad():
            for old, p in zip(saved, (p for group in self.param_groups for p in group["params"])):
                p.copy_(old)
        return super().step()


def sharpness_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            SharpnessAware.events.append(f"training_step {batch_idx}")
            return self.layer(batch[0]).pow(2).mean()

        def on_before_optimizer_step(self, optimizer):
            SharpnessAware.events.append("on_before_optimizer_step")

        def configure_optimizers(self):
            return SharpnessAware(self.parameters(), lr=0.1)

    SharpnessAware.events = []
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=False, enable_checkpointing=False))
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4))
    return outcome(trainer, model, root), list(SharpnessAware.events)


def test_an_optimizer_that_runs_its_closure_twice_trains_again_as_under_lightning(tmp_path):
    """A step of the optimizer's own gets the closure that trains, inside the step, as Lightning's:
    the second call trains at the perturbed weights. Before, trainmesh trained before the step and
    its closure only gave that loss back: both calls the same loss, other weights, silently."""
    found = run_both(sharpness_program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    events = found["trainmesh"][1]  # (the same as Lightning's: compared above)
    assert events[:5] == ["step"] + ["training_step 0", "on_before_optimizer_step"] * 2
    first, again = events[5]
    assert first != again  # the second closure trained again, at the perturbed weights
