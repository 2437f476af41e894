"""Two optimizers in automatic optimization (a 2.x module whose training_step takes no optimizer_idx) are
refused where Lightning 2.6.6 refuses them: right after ``configure_optimizers``, so no ``on_fit_start``,
no loader asked for, and no logger file (``hparams.yaml``). Before: trainmesh refused at the first epoch's
start, after on_fit_start, on_train_start, the model summary and hparams.yaml (/work/progs/owner-small6 i5.py)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh

pl = pytest.importorskip("lightning.pytorch")
HOOKS = ("setup", "on_fit_start", "on_train_start", "on_train_epoch_start", "on_exception")


def _run(package, root):
    calls: list[str] = []

    class Recorder(package.Callback):
        pass

    for hook in HOOKS:
        setattr(Recorder, hook, lambda self, *args, _hook=hook, **kwargs: calls.append(f"callback.{_hook}"))

    class TwoOptimizers(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
            self.save_hyperparameters({"lr": 0.1})

        def training_step(self, batch, batch_idx):
            return self.a(batch[0]).sum()

        def configure_optimizers(self):
            calls.append("configure_optimizers")
            return torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)

        def train_dataloader(self):
            calls.append("train_dataloader")
            return DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)

    trainer = package.Trainer(
        default_root_dir=root,
        max_epochs=1,
        logger=package.loggers.CSVLogger(root),
        callbacks=[Recorder()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(RuntimeError) as raised:
        trainer.fit(TwoOptimizers())
    files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names)
    return str(raised.value).split(" (")[0], calls, files


def test_two_automatic_optimizers_are_refused_at_lightning_s_point(tmp_path):
    theirs = _run(pl, tmp_path / "lightning")
    assert theirs[1] == ["callback.setup", "configure_optimizers", "callback.on_exception"]
    assert _run(trainmesh, tmp_path / "trainmesh") == theirs
