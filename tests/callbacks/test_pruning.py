"""ModelPruning (callbacks/pruning.py) against Lightning 2.6's: the same program (two linear layers,
SGD with momentum, a shuffled loader, 3 epochs, validation each epoch) with each kind of pruning
(global L1 with the lottery ticket reset, local random with a per-epoch amount, local Ln-structured
on validation epoch ends, a pruning left in place) trains bit-identical weights with the same seed,
with the same state-dict keys (``*_orig`` / ``*_mask`` where the pruning is not made permanent),
the same pruned count, and a checkpoint saved after fit holds the same state dict."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import ModelPruning

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import ModelPruning as PlPruning  # noqa: E402


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    return Net


CASES = {
    "global_l1": {"pruning_fn": "l1_unstructured", "amount": 0.3},
    "local_random": {
        "pruning_fn": "random_unstructured",
        "use_global_unstructured": False,
        "amount": lambda epoch: [0.2, 0.0, 0.4][epoch],
        "use_lottery_ticket_hypothesis": False,
    },
    "structured_on_validation": {
        "pruning_fn": "ln_structured",
        "pruning_dim": 1,
        "pruning_norm": 2,
        "use_global_unstructured": False,
        "parameter_names": ["weight"],
        "amount": 1,
        "prune_on_train_epoch_end": False,
    },
    "kept_in_place": {"pruning_fn": prune.L1Unstructured, "amount": 4, "make_pruning_permanent": False},
}


def run(lightning, tmp, kwargs):
    base, trainer_class, pruning = (
        (pl.LightningModule, pl.Trainer, PlPruning) if lightning else (tm.LightningModule, tm.Trainer, ModelPruning)
    )
    pl.seed_everything(6) if lightning else tm.seed_everything(6)
    model = make_module(base)()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(20, 6, generator=g), torch.randn(20, 1, generator=g))
    trainer = trainer_class(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp),
        callbacks=[pruning(**kwargs)],
    )
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True), DataLoader(data, batch_size=10))
    trainer.save_checkpoint(str(tmp / "after.ckpt"))
    checkpoint = torch.load(str(tmp / "after.ckpt"), weights_only=False)
    return model.state_dict(), checkpoint["state_dict"]


@pytest.mark.parametrize("case", list(CASES))
def test_pruning_trains_as_lightning(tmp_path, case):
    their_weights, their_saved = run(True, tmp_path / "pl", CASES[case])
    our_weights, our_saved = run(False, tmp_path / "tm", CASES[case])
    assert list(our_weights) == list(their_weights)
    assert list(our_saved) == list(their_saved)
    pruned = sum(int((t == 0).sum()) for n, t in our_saved.items() if "weight" in n)
    assert pruned > 0  # the pruning measured something
    for name in their_weights:
        assert torch.equal(our_weights[name], their_weights[name]), name
    for name in their_saved:
        assert torch.equal(our_saved[name], their_saved[name]), name


def test_verbose_2_logs_lightning_s_lines(tmp_path, caplog):
    """verbose=2: Lightning's line for each pruned parameter after the total (was: the total only)."""
    import logging

    kwargs = {**CASES["local_random"], "verbose": 2}
    lines = []
    for lightning in (True, False):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            run(lightning, tmp_path / str(lightning), kwargs)
        lines.append([m for m in caplog.messages if m.startswith("Applied")])
    assert len(lines[0]) == 10 and " to `Linear(in_features=6" in lines[0][1]  # 2 prunings x (1 + 4)
    assert lines[1] == lines[0]


REFUSED = [
    {"pruning_fn": "ln_structured", "pruning_dim": 0, "pruning_norm": 2},  # structured, global by default
    {"pruning_fn": "random_structured", "pruning_dim": 0, "use_global_unstructured": True},
    {"pruning_fn": "ln_structured", "use_global_unstructured": False},
    {"pruning_fn": "ln_structured", "pruning_dim": 0, "use_global_unstructured": False},
    {"pruning_fn": "l2_unstructured"},
    {"pruning_fn": prune.L1Unstructured, "use_global_unstructured": False},
    {"pruning_fn": prune.l1_unstructured},
    {"pruning_fn": "l1_unstructured", "parameter_names": ["kernel"]},
    {"pruning_fn": "l1_unstructured", "amount": "half"},
    {"pruning_fn": "l1_unstructured", "verbose": 3},
]


@pytest.mark.parametrize("arguments", REFUSED, ids=range(len(REFUSED)))
def test_arguments_refused_as_lightning(arguments):
    """Lightning refuses each with MisconfigurationException (a structured ``pruning_fn`` with
    ``use_global_unstructured=True``, its default, among them); trainmesh's is one too (and a
    ValueError), with Lightning's message."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration

    from trainmesh.utilities.exceptions import MisconfigurationException

    with pytest.raises(PlMisconfiguration) as theirs:
        PlPruning(**arguments)
    with pytest.raises(MisconfigurationException) as ours:
        ModelPruning(**arguments)
    assert str(ours.value) == str(theirs.value)
    assert isinstance(ours.value, ValueError)


def test_validation_inside_fit_runs_without_inference_mode_as_lightning(tmp_path):
    """Lightning's fit-time validation loop runs under no_grad (a mask made at a validation epoch's
    end trains on); trainer.validate under inference mode."""
    seen = {}
    for lightning in (True, False):
        base, trainer_class = (pl.LightningModule, pl.Trainer) if lightning else (tm.LightningModule, tm.Trainer)

        class Probe(make_module(base)):
            def validation_step(self, batch, batch_idx, key=lightning):
                seen.setdefault(key, []).append((self.trainer.state.fn, torch.is_inference_mode_enabled()))

        trainer = trainer_class(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            default_root_dir=str(tmp_path),
        )
        data = DataLoader(TensorDataset(torch.randn(4, 6), torch.randn(4, 1)), batch_size=4)
        model = Probe()
        trainer.fit(model, data, data)
        trainer.validate(model, data)
    assert [(str(fn), mode) for fn, mode in seen[False]] == [(str(fn), mode) for fn, mode in seen[True]]
    assert [mode for _, mode in seen[False]] == [False, False, True]  # sanity check, epoch's validation, validate
