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
