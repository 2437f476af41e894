"""StochasticWeightAveraging (callbacks/stochastic_weight_avg.py) against Lightning 2.6's: the same
program (a shuffled loader, SGD with momentum and a StepLR that SWA swaps for SWALR, 4 epochs)
trains to the same averaged weights with the same seed, under each annealing strategy, an int or
fractional ``swa_epoch_start`` and a custom ``avg_fn``; the learning rates at each epoch's start,
the callback's checkpoint state (count, scheduler, average) are the same. A model with batch norm
(Lightning's extra forward-only epoch): test_stochastic_weight_avg_batch_norm.py."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import StochasticWeightAveraging

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import StochasticWeightAveraging as PlSWA  # noqa: E402


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    return Net


def make_recorder(base):
    class Rates(base):
        def __init__(self):
            self.rates = []

        def on_train_epoch_start(self, trainer, pl_module):  # after SWA's (listed first)
            self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])

    return Rates


def halfway(averaged, current, count):
    return (averaged + current) / 2


def run(lightning, tmp, swa_kwargs):
    base, callback_base, trainer_class, swa_class = (
        (pl.LightningModule, pl.Callback, pl.Trainer, PlSWA)
        if lightning
        else (tm.LightningModule, tm.Callback, tm.Trainer, StochasticWeightAveraging)
    )
    pl.seed_everything(2) if lightning else tm.seed_everything(2)
    model = make_module(base)()
    swa, recorder = swa_class(**swa_kwargs), make_recorder(callback_base)()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    trainer = trainer_class(
        max_epochs=4,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp),
        callbacks=[swa, recorder],
    )
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return model.state_dict(), recorder.rates, swa.state_dict()


CASES = {
    "cos": {"swa_lrs": 0.05, "swa_epoch_start": 2, "annealing_epochs": 2},
    "linear_fraction": {"swa_lrs": [0.02], "swa_epoch_start": 0.5, "annealing_strategy": "linear"},
    "avg_fn": {"swa_lrs": 0.05, "swa_epoch_start": 1, "annealing_epochs": 1, "avg_fn": halfway},
}


@pytest.mark.parametrize("case", list(CASES))
def test_swa_averages_as_lightning(tmp_path, case):
    their_weights, their_rates, their_state = run(True, tmp_path / "pl", CASES[case])
    our_weights, our_rates, our_state = run(False, tmp_path / "tm", CASES[case])
    assert our_rates == their_rates
    assert our_state["n_averaged"] == their_state["n_averaged"] > 1
    assert our_state["latest_update_epoch"] == their_state["latest_update_epoch"] == 3
    assert our_state["scheduler_state"] == their_state["scheduler_state"]
    for name in their_weights:
        assert torch.equal(our_weights[name], their_weights[name]), name
        assert torch.equal(our_state["average_model_state"][name], their_state["average_model_state"][name]), name


@pytest.mark.parametrize(
    "arguments",
    [{"swa_lrs": 0.1, "swa_epoch_start": 0}, {"swa_lrs": 0.1, "swa_epoch_start": 1.5}, {"swa_lrs": [0.2, 1]}],
)
def test_arguments_checked_as_lightning(arguments):
    """Lightning's MisconfigurationException and words (was: a ValueError a program's except missed)."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration

    from trainmesh.utilities.exceptions import MisconfigurationException

    with pytest.raises(PlMisconfiguration) as theirs:
        PlSWA(**arguments)
    with pytest.raises(MisconfigurationException, match=str(theirs.value).replace("`", ".")) as ours:
        StochasticWeightAveraging(**arguments)
    assert isinstance(ours.value, ValueError)  # as trainmesh raised before
