"""What a program sees of its optimizers and schedulers under Lightning 2.6 and trainmesh, in
automatic and manual optimization: ``trainer.optimizers`` holds the very objects
``configure_optimizers`` returned (type, identity, repr); ``self.optimizers()`` is a
``LightningOptimizer`` named ``Lightning<Class>`` over that object (``.optimizer`` is it, its
``param_groups`` and ``state`` the same objects); ``trainer.lr_scheduler_configs`` holds Lightning's
``LRSchedulerConfig`` (its type, fields and repr)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port

pytest.importorskip("lightning.pytorch")


def _seen(L, made, automatic):
    from importlib import import_module

    core = import_module(
        "lightning.pytorch.core.optimizer" if L.pl.__name__.startswith("lightning") else "trainmesh.core.optimizer"
    )
    types = import_module(f"{L.pl.__name__}.utilities.types")
    seen = {}

    class Model(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.automatic_optimization = automatic

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if batch_idx == 0:
                given = self.optimizers()
                seen["self.optimizers()"] = (
                    type(given).__name__,
                    isinstance(given, core.LightningOptimizer),
                    isinstance(given, torch.optim.Adam),
                    given.optimizer is made["optimizer"],
                    given.param_groups is made["optimizer"].param_groups,
                    given.state is made["optimizer"].state,
                    repr(given).splitlines()[0],
                )
                seen["self.optimizers(use_pl_optimizer=False)"] = (
                    self.optimizers(use_pl_optimizer=False) is made["optimizer"]
                )
                seen["self.lr_schedulers()"] = self.lr_schedulers() is made["scheduler"]
            if not automatic:
                optimizer = self.optimizers()
                optimizer.zero_grad()
                self.manual_backward(loss)
                optimizer.step()
                return None
            return loss

        def configure_optimizers(self):
            made["optimizer"] = torch.optim.Adam(self.parameters(), lr=0.1)
            made["scheduler"] = torch.optim.lr_scheduler.StepLR(made["optimizer"], 1)
            return [made["optimizer"]], [made["scheduler"]]

    return Model(), seen, types


def _run(name, automatic):
    L = port(name)
    made: dict = {}
    model, seen, types = _seen(L, made, automatic)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.pl.Trainer(max_epochs=1, accelerator="cpu", **quiet)
        trainer.fit(model, DataLoader(data, batch_size=4))
    optimizer, config = trainer.optimizers[0], trainer.lr_scheduler_configs[0]
    seen["trainer.optimizers"] = (type(optimizer).__name__, optimizer is made["optimizer"], repr(optimizer))
    seen["state_dict"] = sorted(optimizer.state_dict())
    seen["lr_scheduler_configs"] = (
        type(config).__name__,
        isinstance(config, types.LRSchedulerConfig),
        config.scheduler is made["scheduler"],
        re.sub(r" at 0x[0-9a-f]+", "", repr(config)),
    )
    return seen


@pytest.mark.parametrize("automatic", [True, False], ids=["automatic", "manual"])
def test_the_optimizers_a_program_sees_are_lightnings(automatic):
    theirs, ours = _run("lightning", automatic), _run("trainmesh", automatic)
    assert theirs["trainer.optimizers"][:2] == ("Adam", True)  # the reference: the user's own object
    assert ours == theirs
