"""A program reading ``trainer.num_*_batches`` at ten hooks and between fit, validate, test and predict,
written once and run under Lightning 2.6, under trainmesh (``tests/trainer/test_differential_programs_unseen.py``)
and under pytorch-lightning 1.9.5 (``record_lightning_1_9_batch_counts.py``, whose venv has neither of the
others: this module imports only torch)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _data(n: int, features: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    return x, (x.sum(1, keepdim=True) > 0).float()


def trainer_kwargs(root: Path, **kwargs: Any) -> dict[str, Any]:
    """helpers.programs.trainer_kwargs (not imported: that module imports trainmesh)."""
    return dict(accelerator="cpu", devices=1, default_root_dir=root, enable_progress_bar=False, **kwargs)


def reading_batch_counts(L: SimpleNamespace, root: Path) -> list[tuple[str, dict[str, Any]]]:
    """A callback reading trainer.num_*_batches before, during and after fit (two validation loaders,
    a sanity check), validate, test and predict (two loaders): Lightning 2.6 gives one count per loader."""
    names = ("num_val_batches", "num_sanity_val_batches", "num_test_batches", "num_predict_batches")

    def counts(trainer):
        return {name: getattr(trainer, name) for name in (*names, "num_training_batches")}

    class Reader(L.pl.Callback):
        def __init__(self):
            self.seen = []

        def on_fit_start(self, trainer, pl_module):
            self.seen.append(("on_fit_start", counts(trainer)))

        def on_sanity_check_start(self, trainer, pl_module):
            self.seen.append(("on_sanity_check_start", counts(trainer)))

        def on_validation_start(self, trainer, pl_module):
            self.seen.append(("on_validation_start", counts(trainer)))

        def on_validation_epoch_end(self, trainer, pl_module):
            self.seen.append(("on_validation_epoch_end", counts(trainer)))

        def on_train_epoch_end(self, trainer, pl_module):
            self.seen.append(("on_train_epoch_end", counts(trainer)))

        def on_fit_end(self, trainer, pl_module):
            self.seen.append(("on_fit_end", counts(trainer)))

        def on_test_start(self, trainer, pl_module):
            self.seen.append(("on_test_start", counts(trainer)))

        def on_test_epoch_end(self, trainer, pl_module):
            self.seen.append(("on_test_epoch_end", counts(trainer)))

        def on_predict_start(self, trainer, pl_module):
            self.seen.append(("on_predict_start", counts(trainer)))

        def on_predict_end(self, trainer, pl_module):
            self.seen.append(("on_predict_end", counts(trainer)))

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return None

        test_step = validation_step

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.net(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def loader(n):
        return DataLoader(TensorDataset(*_data(n)), batch_size=4)

    reader, model = Reader(), Model()
    kwargs = trainer_kwargs(root, callbacks=[reader], logger=False, max_epochs=1, enable_checkpointing=False)
    trainer = L.pl.Trainer(**kwargs, num_sanity_val_steps=1, limit_val_batches=2)
    reader.seen.append(("before", counts(trainer)))
    trainer.fit(model, loader(8), [loader(10), loader(4)])
    reader.seen.append(("after fit", counts(trainer)))
    trainer.validate(model, loader(10))
    reader.seen.append(("after validate", counts(trainer)))
    trainer.test(model, loader(10))
    reader.seen.append(("after test", counts(trainer)))
    trainer.predict(model, [loader(10), loader(6)])
    reader.seen.append(("after predict", counts(trainer)))
    return reader.seen
