"""Code from Lightning 2.6's documentation pages on training tricks, extensions, profiling, debugging
and the CLI (docs/source-pytorch: advanced/, extensions/, the profiler and finder pages, debug/, cli/), each
written as a small program of our own, run under Lightning 2.6 and after the mechanical port under trainmesh, compared as
data (``helpers.programs``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _data(n: int = 24) -> DataLoader:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, 10 * x.sum(1, keepdim=True)), batch_size=8)


def _module(L):
    class Net(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net


def test_gradient_clip_val_zero_trains_without_clipping_as_lightning(tmp_path):
    """training_tricks.rst: ``Trainer(gradient_clip_val=0)`` is the documented default ("don't clip").
    trainmesh refused it with a ValueError ("must be positive") before training."""

    def program(L, root):
        model = _module(L)()
        trainer = L.pl.Trainer(
            **trainer_kwargs(root, logger=False, enable_checkpointing=False, max_epochs=2, gradient_clip_val=0)
        )
        trainer.fit(model, _data())
        return outcome(trainer, model, root, clip=trainer.gradient_clip_val)

    found = run_both(program, tmp_path)
    assert found["lightning"]["extra"]["clip"] == 0
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_resuming_without_a_callback_of_the_checkpoint_warns_as_lightning(tmp_path):
    """callbacks_state.rst: a checkpoint holds each stateful callback's state under its ``state_key``.
    Resuming with a Trainer that lacks one of them, Lightning warns ("Be aware that when using
    `ckpt_path`, ... Please add the following callbacks: [...]"); trainmesh dropped the state silently.
    A resume with the same callbacks (the default ones included) warns nothing under either."""
    import warnings

    def program(L, root):
        first = L.pl.Trainer(
            **trainer_kwargs(
                root / "a", logger=False, max_epochs=1, callbacks=[L.callbacks.EarlyStopping("train_loss")]
            )
        )
        first.fit(_module(L)(), _data())
        path = first.checkpoint_callback.best_model_path
        said = {}
        for name, callbacks in (("without", []), ("with", [L.callbacks.EarlyStopping("train_loss")])):
            trainer = L.pl.Trainer(**trainer_kwargs(root / name, logger=False, max_epochs=2, callbacks=callbacks))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.fit(_module(L)(), _data(), ckpt_path=path)
            said[name] = sorted(str(w.message) for w in caught if "Be aware" in str(w.message))
        return said

    found = run_both(program, tmp_path)
    assert found["lightning"]["with"] == []
    assert "EarlyStopping{'monitor': 'train_loss', 'mode': 'min'}" in found["lightning"]["without"][0]
    assert found["trainmesh"] == found["lightning"]


def test_clashing_hyperparameters_without_a_logger_train_as_lightning(tmp_path):
    """Lightning merges the module's and the data module's saved hyperparameters (raising on a name
    saved with two values) only to hand them to the loggers: with ``logger=False`` it never merges and
    the fit trains. trainmesh merged anyway and stopped with Lightning's RuntimeError."""

    def program(L, root):
        class Data(L.pl.LightningDataModule):
            def __init__(self, lr: float = 0.3) -> None:
                super().__init__()
                self.save_hyperparameters()

            def train_dataloader(self):
                return _data()

        class Net(_module(L)):
            def __init__(self, lr: float = 0.1) -> None:
                super().__init__()
                self.save_hyperparameters()

        said = {}
        for logger in (False, True):
            model = Net()
            trainer = L.pl.Trainer(
                **trainer_kwargs(root / str(logger), logger=logger, enable_checkpointing=False, max_epochs=1)
            )
            try:
                trainer.fit(model, datamodule=Data())
                said[logger] = sum(float(p.sum()) for p in model.parameters())
            except RuntimeError as error:
                said[logger] = str(error)
        return said

    found = run_both(program, tmp_path)
    assert isinstance(found["lightning"][False], float) and "Error while merging" in found["lightning"][True]
    assert found["trainmesh"] == found["lightning"]


def test_simple_profiler_counts_the_training_fetches_as_lightning(tmp_path):
    """profiler_basic.rst's ``Trainer(profiler="simple")`` report: Lightning records one
    ``[_TrainingEpochLoop].train_dataloader_next`` per training batch (3 with limit_train_batches=3);
    trainmesh recorded one more, its call past the last batch."""

    def program(L, root):
        trainer = L.pl.Trainer(
            **trainer_kwargs(root, logger=False, enable_checkpointing=False, max_epochs=2, limit_train_batches=2),
            profiler="simple",
        )
        trainer.fit(_module(L)(), _data(32))
        return {k: len(v) for k, v in trainer.profiler.recorded_durations.items() if k.endswith("_next")}

    found = run_both(program, tmp_path)
    assert found["lightning"] == {"[_TrainingEpochLoop].train_dataloader_next": 4}
    assert found["trainmesh"] == found["lightning"]
