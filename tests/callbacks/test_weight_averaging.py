"""WeightAveraging and EMAWeightAveraging (callbacks/weight_averaging.py) against Lightning 2.6's: the
same program (a linear layer and a batch norm, shuffled data, SGD with momentum, validation each
epoch) with the same seed trains to the same weights (the average, in the module after fit), the
same validation loss (on the averaged weights), the same checkpoint entries (``state_dict``: the
average, ``current_model_state``, ``averaging_state``) and the same weights after a fit resumed from
that checkpoint; with SWA's default average, EMA updated from a step on every 2 steps, EMA by epoch,
and accumulation."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import EMAWeightAveraging, WeightAveraging

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch import callbacks as pl_callbacks  # noqa: E402


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    return Net


def data():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))


CASES = {
    "swa_every_step": ("WeightAveraging", {}, {}),
    "ema_from_step_3_every_2": (
        "EMAWeightAveraging",
        dict(decay=0.9, update_every_n_steps=2, update_starting_at_step=3),
        {},
    ),
    "ema_by_epoch": ("EMAWeightAveraging", dict(decay=0.5, update_every_n_steps=0, update_starting_at_epoch=1), {}),
    "ema_accumulate": ("EMAWeightAveraging", dict(decay=0.8), dict(accumulate_grad_batches=2)),
}


def run(lightning, tmp, case, *, max_epochs=3, ckpt_path=None, shuffle=True):
    name, kwargs, settings = CASES[case]
    module_base, trainer_class, seed = (
        (pl.LightningModule, pl.Trainer, pl.seed_everything)
        if lightning
        else (tm.LightningModule, tm.Trainer, tm.seed_everything)
    )
    averaging = getattr(pl_callbacks, name) if lightning else {"WeightAveraging": WeightAveraging}.get(name)
    averaging = averaging or EMAWeightAveraging
    seed(3)
    model = make_module(module_base)()
    callback = averaging(**kwargs)
    trainer = trainer_class(
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp),
        callbacks=[callback],
        **settings,
    )
    trainer.fit(
        model, DataLoader(data(), batch_size=4, shuffle=shuffle), DataLoader(data(), batch_size=8), ckpt_path=ckpt_path
    )
    trainer.save_checkpoint(tmp / "end.ckpt")
    saved = torch.load(tmp / "end.ckpt", weights_only=False)
    entries = {key: saved[key] for key in ("state_dict", "current_model_state", "averaging_state")}
    return model.state_dict(), float(trainer.callback_metrics["val_loss"]), entries, callback.state_dict()


def assert_same(ours, theirs):
    (our_weights, our_val, our_entries, our_state), (their_weights, their_val, their_entries, their_state) = (
        ours,
        theirs,
    )
    assert our_weights.keys() == their_weights.keys()
    for key in our_weights:
        torch.testing.assert_close(our_weights[key], their_weights[key], rtol=0, atol=0)
    assert our_val == pytest.approx(their_val, rel=1e-6)
    for entry in ("state_dict", "current_model_state", "averaging_state"):
        assert our_entries[entry].keys() == their_entries[entry].keys()
        for key in our_entries[entry]:
            torch.testing.assert_close(our_entries[entry][key], their_entries[entry][key], rtol=0, atol=0)
    assert our_state == their_state


@pytest.mark.parametrize("case", list(CASES))
def test_same_average_as_lightning(tmp_path, case):
    theirs = run(True, tmp_path / "pl", case)
    ours = run(False, tmp_path / "tm", case)
    assert_same(ours, theirs)


def test_resumed_fit_restores_the_average(tmp_path):
    """Each framework resumes its own 2-epoch checkpoint to a third epoch (a loader in order:
    trainmesh's resume restores the generators the checkpoint holds, Lightning's does not)."""
    outcomes = []
    for lightning, name in ((True, "pl"), (False, "tm")):
        run(lightning, tmp_path / name, "ema_from_step_3_every_2", max_epochs=2, shuffle=False)
        resumed = tmp_path / name / "resumed"
        outcomes.append(
            run(
                lightning,
                resumed,
                "ema_from_step_3_every_2",
                max_epochs=3,
                ckpt_path=str(tmp_path / name / "end.ckpt"),
                shuffle=False,
            )
        )
    assert_same(outcomes[1], outcomes[0])


def test_sharded_strategy_is_refused():
    class Capabilities:
        shards_parameters = True

    class View:
        runtime = type("Runtime", (), {"capabilities": Capabilities()})()

    with pytest.raises(ValueError, match="shards parameters"):
        WeightAveraging().setup(View(), nn.Linear(1, 1), "fit")
