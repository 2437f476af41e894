"""``LearningRateMonitor.lrs`` (the history a program reads back), its momentum warning and its
errors, beside Lightning 2.6's (tests/helpers/programs.py runs the same program under both).
Reduced from Lightning's own tests/tests_pytorch/callbacks/test_lr_monitor.py."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _model_class(L, make_optimizer):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(3, 3)
            self.head = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.head(self.backbone(batch[0])), batch[1])

        def configure_optimizers(self):
            return make_optimizer(self)

    return Model


def _data():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=4)


def history_as_groups_are_added(L, root):
    """A finetuning callback adds the backbone as a second param group at epoch 1: the monitor's
    ``lrs`` read at each epoch's start and at the end (names, order, values)."""

    class Unfreeze(L.callbacks.BaseFinetuning):
        def freeze_before_training(self, pl_module):
            self.freeze(pl_module.backbone)

        def finetune_function(self, pl_module, epoch, optimizer):
            if epoch == 1:
                self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, lr=0.05)

    monitor = L.callbacks.LearningRateMonitor(logging_interval="step")

    class Reader(L.pl.Callback):
        def __init__(self):
            self.seen = []

        def on_train_epoch_start(self, trainer, pl_module):
            self.seen.append({k: list(v) for k, v in monitor.lrs.items()})

    def sgd(module):
        return torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=0.1)

    reader = Reader()
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=3, log_every_n_steps=1, enable_checkpointing=False),
        callbacks=[Unfreeze(), monitor, reader],
        logger=L.loggers.CSVLogger(root),
    )
    trainer.fit(_model_class(L, sgd)(), _data())
    return reader.seen, list(monitor.lrs.items()), monitor.last_momentum_values


def momentum_warning_and_errors(L, root):
    """``log_momentum=True`` with Adagrad (no momentum); a monitor without a logger; two groups of one
    optimizer with one name: the warning's class and words, the errors' classes and words."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as LightningMisconfiguration

    from trainmesh.utilities.exceptions import MisconfigurationException

    misconfiguration = LightningMisconfiguration if L.pl.__name__.startswith("lightning") else MisconfigurationException
    found = []

    def adagrad(module):
        return torch.optim.Adagrad(module.parameters(), lr=0.1)

    def same_names(module):
        groups = [
            {"params": module.backbone.parameters(), "name": "a"},
            {"params": module.head.parameters(), "name": "a"},
        ]
        return torch.optim.SGD(groups, lr=0.1)

    settings = dict(max_epochs=1, limit_train_batches=1, enable_checkpointing=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = L.callbacks.LearningRateMonitor(log_momentum=True)
        L.pl.Trainer(**trainer_kwargs(root, **settings), callbacks=[monitor]).fit(_model_class(L, adagrad)(), _data())
    found.append([(w.category.__name__, str(w.message)) for w in caught if "momentum" in str(w.message)])
    for optimizer, logger in ((adagrad, False), (same_names, True)):
        monitor = L.callbacks.LearningRateMonitor()
        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=logger, **settings), callbacks=[monitor])
        with pytest.raises(misconfiguration) as raised:
            trainer.fit(_model_class(L, optimizer)(), _data())
        found.append(str(raised.value))
    return found


def test_lrs_history_moves_to_pg1_when_a_group_is_added(tmp_path):
    """Before: trainmesh's ``lrs`` filled names as they were first logged and kept the history before the
    new group under ``lr-SGD`` (Lightning moves it to ``lr-SGD/pg1``, and its names exist, empty, from
    on_train_start); ``last_momentum_values`` had no names."""
    found = run_both(history_as_groups_are_added, tmp_path)
    assert [name for name, _ in found["lightning"][1]] == ["lr-SGD/pg1", "lr-SGD/pg2"]
    assert found["trainmesh"] == found["lightning"]


def test_momentum_warning_and_errors_are_lightnings(tmp_path):
    """Before: a ``UserWarning`` in trainmesh's words where Lightning warns a ``RuntimeWarning``; ``ValueError``s
    in trainmesh's words where Lightning raises ``MisconfigurationException``."""
    found = run_both(momentum_warning_and_errors, tmp_path)
    ours, theirs = found["trainmesh"], found["lightning"]
    assert ours[0] == theirs[0] and theirs[0][0][0] == "RuntimeWarning"
    assert ours[1].startswith(theirs[1])  # trainmesh's then says how to give one
    assert ours[2] == theirs[2]
