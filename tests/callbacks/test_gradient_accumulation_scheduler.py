"""GradientAccumulationScheduler (callbacks/gradient_accumulation_scheduler.py) against Lightning
2.6's: the same program (a shuffled loader of 7 batches, SGD with momentum, 3 epochs) with
``scheduling={1: 2, 2: 3}`` trains bit-identical weights with the same seed, makes the same number
of optimizer steps (7 + 4 + 3) and the Trainer's ``accumulate_grad_batches`` is the same at each
epoch's end; the same settings are refused."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import GradientAccumulationScheduler

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import GradientAccumulationScheduler as PlScheduler  # noqa: E402


def make_module(base, *, manual=False):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    return Net


def make_recorder(base):
    class Factors(base):
        def __init__(self):
            self.factors = []

        def on_train_epoch_end(self, trainer, pl_module):
            self.factors.append((trainer.current_epoch, trainer.accumulate_grad_batches, trainer.global_step))

    return Factors


def run(lightning, tmp, *, accumulate=1, manual=False):
    base, callback_base, trainer_class, scheduler = (
        (pl.LightningModule, pl.Callback, pl.Trainer, PlScheduler)
        if lightning
        else (tm.LightningModule, tm.Callback, tm.Trainer, GradientAccumulationScheduler)
    )
    pl.seed_everything(5) if lightning else tm.seed_everything(5)
    model = make_module(base, manual=manual)()
    recorder = make_recorder(callback_base)()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(26, 4, generator=g), torch.randn(26, 1, generator=g))
    trainer = trainer_class(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accumulate_grad_batches=accumulate,
        default_root_dir=str(tmp),
        callbacks=[scheduler({1: 2, 2: 3}), recorder],
    )
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return model.state_dict(), recorder.factors


def test_scheduled_accumulation_trains_as_lightning(tmp_path):
    their_weights, their_factors = run(True, tmp_path / "pl")
    our_weights, our_factors = run(False, tmp_path / "tm")
    assert our_factors == their_factors == [(0, 1, 7), (1, 2, 11), (2, 3, 14)]
    for name in their_weights:
        assert torch.equal(our_weights[name], their_weights[name]), name


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"accumulate": 2}, ValueError, "Either remove `accumulate_grad_batches`"),
        ({"manual": True}, RuntimeError, "not supported for\\s+manual optimization"),
    ],
)
def test_refused_as_lightning(tmp_path, kwargs, error, match):
    for lightning in (True, False):
        with pytest.raises(error, match=match):
            run(lightning, tmp_path / str(lightning), **kwargs)


def test_schedule_checked_as_lightning():
    with pytest.raises(TypeError, match="Empty dict"):
        GradientAccumulationScheduler({})
    with pytest.raises(ValueError, match="greater than 0"):
        GradientAccumulationScheduler({1: 0})
    assert GradientAccumulationScheduler({2: 4}).scheduling == PlScheduler({2: 4}).scheduling == {2: 4, 0: 1}


@pytest.mark.parametrize("scheduling", [{1: 2, -3: 4}, {0: 0}])
def test_a_bad_scheduling_raises_lightnings_exception(scheduling):
    """Lightning 2.6.6 raises MisconfigurationException (trainmesh raised ValueError only)."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler as Theirs
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as TheirError

    import trainmesh.callbacks
    from trainmesh.utilities.exceptions import MisconfigurationException

    for scheduler, error in (
        (Theirs, TheirError),
        (trainmesh.callbacks.GradientAccumulationScheduler, MisconfigurationException),
    ):
        with pytest.raises(error, match="should be an int"):
            scheduler(scheduling=scheduling)
