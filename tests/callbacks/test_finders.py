"""Lightning 2.6's ``LearningRateFinder`` and ``BatchSizeFinder`` callbacks, in a fit under
Lightning 2.6.6 and trainmesh with the same seed: the search's rates and losses, the suggested rate
(in the model's ``lr`` and the optimizer during training), the batch size found, and the weights the
fit then trains (both run the search inside the fit, at its start:
``callbacks/finders.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


def _model(framework, *, shuffle: bool = True):
    class Net(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lr = 0.01
            self.batch_size = 4
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
            return DataLoader(data, batch_size=self.batch_size, shuffle=shuffle)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    return Net


def _fit(framework, tmp, finder, *, shuffle: bool = True, callbacks_after=(), **trainer_kwargs):
    lrs: list[float] = []

    class Rates(framework.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    framework.seed_everything(8)
    model = _model(framework, shuffle=shuffle)()
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp),
        callbacks=[finder, Rates(), *callbacks_after],
        **trainer_kwargs,
    )
    trainer.fit(model)
    return model, lrs, trainer


def test_learning_rate_finder_searches_and_trains_as_lightning(tmp_path) -> None:
    found = {}
    for framework in (L, tm):
        finder = framework.callbacks.LearningRateFinder(
            min_lr=1e-4, max_lr=0.5, num_training_steps=30, early_stop_threshold=None
        )
        # In order: Lightning's fit after its nested search reads a shuffling loader in another order
        # than a fit without it (its random draws around the nested run); trainmesh's as without it.
        model, lrs, trainer = _fit(framework, tmp_path / framework.__name__, finder, shuffle=False)
        found[framework] = (finder.optimal_lr, model, lrs, trainer.global_step)
    (theirs, their_model, their_lrs, their_steps), (ours, our_model, our_lrs, our_steps) = found[L], found[tm]
    assert ours.results["lr"] == theirs.results["lr"]
    assert ours.results["loss"] == pytest.approx(theirs.results["loss"], abs=1e-6, rel=0)
    assert ours.suggestion() == theirs.suggestion() and our_model.lr == their_model.lr == theirs.suggestion()
    assert our_lrs == their_lrs == [theirs.suggestion(), theirs.suggestion() / 2]  # the suggestion, then StepLR
    assert our_steps == their_steps == 32
    for name, value in their_model.state_dict().items():
        torch.testing.assert_close(our_model.state_dict()[name], value, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("mode", "size", "steps"), [("power", 8, 16), ("binsearch", 7, 20)])
def test_batch_size_finder_finds_and_trains_as_lightning(tmp_path, mode: str, size: int, steps: int) -> None:
    found = {}
    for framework in (L, tm):
        finder = framework.callbacks.BatchSizeFinder(mode=mode, steps_per_trial=2, max_trials=3)
        model, _, trainer = _fit(framework, tmp_path / framework.__name__, finder)
        found[framework] = (finder.optimal_batch_size, model, trainer.global_step)
    (their_size, their_model, their_steps), (our_size, our_model, our_steps) = found[L], found[tm]
    assert our_size == their_size == our_model.batch_size == their_model.batch_size == size  # 3 trials
    assert our_steps == their_steps == steps  # 2 epochs of 64 samples at the size found
    for name, value in their_model.state_dict().items():
        torch.testing.assert_close(our_model.state_dict()[name], value, rtol=0, atol=1e-6)


def test_a_search_during_the_fit_is_refused_with_the_reason(tmp_path) -> None:
    class AtEpochs(tm.callbacks.LearningRateFinder):  # Lightning's documented milestone pattern
        def on_train_epoch_start(self, trainer, pl_module):
            self.lr_find(trainer, pl_module)

    with pytest.raises(RuntimeError, match="during a running fit is not supported.*Tuner"):
        _fit(tm, tmp_path, AtEpochs(num_training_steps=5))
    with pytest.raises(ValueError, match="BatchSizeFinder during validate is not supported"):
        Net = _model(tm)

        class Validated(Net):
            def validation_step(self, batch, batch_idx):
                return None

        tm.Trainer(accelerator="cpu", logger=False, callbacks=[tm.callbacks.BatchSizeFinder()]).validate(
            Validated(), DataLoader(TensorDataset(torch.randn(4, 4), torch.randn(4, 1)))
        )


def test_a_batch_size_finder_on_several_processes_is_refused_as_lightning_refuses_it(tmp_path) -> None:
    """Lightning's BatchSizeFinder.setup refuses a distributed Trainer (before: trainmesh's ValueError in its
    own words, which a program catching Lightning's MisconfigurationException missed)."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import BatchSizeFinder

    from trainmesh.utilities.exceptions import MisconfigurationException

    theirs = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, default_root_dir=str(tmp_path))
    with pytest.raises(Exception) as lightning_error:
        BatchSizeFinder().setup(theirs, None, "fit")
    ours = tm.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", logger=False, default_root_dir=str(tmp_path),
        callbacks=[tm.callbacks.BatchSizeFinder()],
    )  # fmt: skip
    with pytest.raises(MisconfigurationException) as our_error:
        ours.fit(_model(tm)())
    assert type(lightning_error.value).__name__ == "MisconfigurationException"
    assert str(our_error.value).startswith(str(lightning_error.value))


def test_a_search_at_a_later_epoch_is_refused_before_training(tmp_path) -> None:
    """Lightning's documented FineTuneLearningRateFinder with a milestone after the first epoch (l-progs22 p7):
    the refusal comes at the fit's start, before a search or a step (before: after the epochs before the milestone
    had trained, their work lost)."""

    class Milestones(tm.callbacks.LearningRateFinder):
        def on_fit_start(self, *args, **kwargs):
            return

        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch in (1,):
                self.lr_find(trainer, pl_module)

    steps: list[int] = []

    class Steps(tm.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            steps.append(batch_idx)

    with pytest.raises(RuntimeError, match=r"Milestones\.on_train_epoch_start calls lr_find\(\).*Tuner"):
        _fit(tm, tmp_path, Milestones(num_training_steps=5), callbacks_after=[Steps()])
    assert steps == []
