"""CombinedLoader (utilities/combined_loader.py) against Lightning 2.6's: the same iterables read in
each mode give the same batches, indices and lengths; and a Trainer fed one (or a list or dict of
train loaders, which Lightning reads as one in ``max_size_cycle`` mode) trains the same weights as
Lightning's with the same seed (shuffled loaders of different lengths, 2 epochs), and validates on
a sequential one with the same metrics per ``dataloader_idx``."""

import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.utilities import CombinedLoader
from trainmesh.utilities.combined_loader import CombinedLoader as CombinedLoaderFromModule

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.utilities import CombinedLoader as PlCombinedLoader  # noqa: E402

MODES = ["min_size", "max_size_cycle", "max_size", "sequential"]


def iterables():
    return {"a": DataLoader(range(6), batch_size=4), "b": [DataLoader(range(15), batch_size=5), range(3)]}


def as_lists(combined):
    out = []
    for batch, batch_idx, dataloader_idx in combined:
        out.append((repr(batch), batch_idx, dataloader_idx))
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limits", [None, 2, [1, 3, 2]])
def test_modes_read_as_lightnings(mode, limits):
    ours, theirs = CombinedLoader(iterables(), mode), PlCombinedLoader(iterables(), mode)
    ours.limits, theirs.limits = limits, limits
    iter(ours), iter(theirs)
    assert len(ours) == len(theirs)
    assert as_lists(ours) == as_lists(theirs)
    assert len(ours.flattened) == 3 and ours._dataset_length() == theirs._dataset_length()
    assert repr(ours.sampler).count("Sampler") == repr(theirs.sampler).count("Sampler")
    assert CombinedLoaderFromModule is CombinedLoader


@pytest.mark.parametrize("mode", MODES)
def test_a_started_combined_loader_pickles_as_lightning_s(mode):
    """Lightning's pickles after iteration began (a copy holds None for a started DataLoader's
    iterator, which torch refuses to pickle); trainmesh's raised NotImplementedError."""
    copies = []
    for combined in (CombinedLoader(iterables(), mode), PlCombinedLoader(iterables(), mode)):
        started = iter(combined)
        next(started)
        copy = pickle.loads(pickle.dumps(combined))
        copies.append(as_lists(copy))  # read again from its start
    assert copies[0] == copies[1]


def test_length_before_iteration_is_refused_as_lightning():
    with pytest.raises(RuntimeError, match="call `iter"):
        len(CombinedLoader(iterables()))
    with pytest.raises(ValueError, match="Unsupported mode"):
        CombinedLoader(iterables(), "longest")


def make_module(base):
    class TwoSources(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            parts = batch.values() if isinstance(batch, dict) else batch
            losses = [F.mse_loss(self.layer(x), y) for x, y in (p for p in parts if p is not None)]
            return sum(losses)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            x, y = batch
            self.log("val_loss", F.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return TwoSources


def loader(n, seed, batch_size=4):
    g = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size, True)


def run(framework, train, *, val=None, tmp):
    base, trainer_class, combined_class = framework
    pl.seed_everything(3) if trainer_class is pl.Trainer else tm.seed_everything(3)
    model = make_module(base)()
    sources = {"a": loader(12, 1), "b": loader(20, 2)}
    train_loaders = train(combined_class, sources)
    val_loaders = None if val is None else combined_class([loader(8, 5), loader(12, 6)], val)
    trainer = trainer_class(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp),
    )
    trainer.fit(model, train_loaders, val_loaders)
    return model.state_dict(), {k: float(v) for k, v in trainer.callback_metrics.items()}, trainer.global_step


TRAIN = {
    "min_size": lambda cls, s: cls(s, "min_size"),
    "max_size_cycle": lambda cls, s: cls(s, "max_size_cycle"),
    "max_size": lambda cls, s: cls(s, "max_size"),
    "dict": lambda cls, s: s,
    "list": lambda cls, s: [s["a"], s["b"]],
}


@pytest.mark.parametrize("train", list(TRAIN))
def test_trainer_trains_on_a_combined_loader_as_lightning(tmp_path, train):
    val = "sequential" if train == "max_size_cycle" else None
    theirs = run((pl.LightningModule, pl.Trainer, PlCombinedLoader), TRAIN[train], val=val, tmp=tmp_path / "pl")
    ours = run((tm.LightningModule, tm.Trainer, CombinedLoader), TRAIN[train], val=val, tmp=tmp_path / "tm")
    assert ours[2] == theirs[2]  # optimizer steps: min_size 3 per epoch, the others 5
    assert ours[1] == pytest.approx(theirs[1], abs=1e-6, rel=0)
    if val:
        assert set(ours[1]) == {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"}
    for name in theirs[0]:
        assert torch.equal(ours[0][name], theirs[0][name]), name


def test_sequential_train_loader_refused_as_lightning(tmp_path):
    with pytest.raises(ValueError, match='CombinedLoader\\(mode="sequential"\\)'):
        run((tm.LightningModule, tm.Trainer, CombinedLoader), lambda cls, s: cls(s, "sequential"), tmp=tmp_path)
