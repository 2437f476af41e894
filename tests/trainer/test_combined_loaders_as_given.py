"""Train loaders given as a list (even of one), a tuple, a dict or a ``CombinedLoader``, as Lightning
2.6 reads them: ``training_step`` gets a list of one batch for a list of one loader (trainmesh gave
the batch itself, so ``batch[0]`` was its first row), under ``overfit_batches`` every loader of a
dict or ``CombinedLoader`` is read in order (trainmesh read them shuffled, other batches each
epoch); and ``trainer.train_dataloader``, ``val_dataloaders``, ``test_dataloaders`` hand the loaders
back in the structure the program gave them (Lightning's ``CombinedLoader.iterables``), each loader
the one the run reads (trainmesh gave its internal reader, whose iteration yields batches).
From Lightning's own ``tests_pytorch/trainer/test_dataloaders.py``
(``test_multiple_dataloaders_with_random_sampler_overfit_batches`` reads ``dl.sampler`` of each)."""

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

import trainmesh as tm
from trainmesh.demos.boring_classes import BoringModel as TmBoringModel
from trainmesh.demos.boring_classes import RandomDataset
from trainmesh.utilities.combined_loader import CombinedLoader as TmCombinedLoader

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.demos.boring_classes import BoringModel as PlBoringModel  # noqa: E402
from lightning.pytorch.utilities import CombinedLoader as PlCombinedLoader  # noqa: E402

FRAMEWORKS = {
    "lightning": (pl.Trainer, PlBoringModel, PlCombinedLoader),
    "trainmesh": (tm.Trainer, TmBoringModel, TmCombinedLoader),
}
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def _loader(n=8):
    data = RandomDataset(32, n)
    return DataLoader(data, sampler=RandomSampler(data), batch_size=2)


def _describe(x):
    """A loader as (sampler class, dataset length); the structure around it as itself."""
    if isinstance(x, DataLoader):
        return (type(x.sampler).__name__, len(x.dataset))
    if isinstance(x, dict):
        return {key: _describe(value) for key, value in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_describe(value) for value in x)
    return type(x).__name__


def _first_tensor(batch):
    while not torch.is_tensor(batch):
        batch = batch["a"] if isinstance(batch, dict) else batch[0]
    return batch


def _run(framework, make_train, make_val, overfit):
    Trainer, BoringModel, CombinedLoader = FRAMEWORKS[framework]
    seen = {}

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            seen.setdefault("train", (_describe(self.trainer.train_dataloader), type(batch).__name__))
            return super().training_step(_first_tensor(batch), batch_idx)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            seen.setdefault("val", _describe(self.trainer.val_dataloaders))
            return super().validation_step(_first_tensor(batch), batch_idx)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            seen.setdefault("test", _describe(self.trainer.test_dataloaders))

        def train_dataloader(self):
            return make_train(CombinedLoader)

        def val_dataloader(self):
            return make_val(CombinedLoader)

    trainer = Trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        overfit_batches=overfit,
        **QUIET,
    )
    model = Model()
    trainer.fit(model)
    seen["after fit"] = (_describe(trainer.train_dataloader), _describe(trainer.val_dataloaders))
    trainer.test(model, dataloaders=make_val(CombinedLoader), verbose=False)
    return seen


CASES = {
    "one loader": (lambda C: _loader(), lambda C: _loader()),
    "a list of one": (lambda C: [_loader()], lambda C: [_loader()]),
    "lists": (lambda C: [_loader(), _loader(4)], lambda C: [_loader(), _loader(4)]),
    "a tuple": (lambda C: (_loader(), _loader(4)), lambda C: [_loader(), _loader(4)]),
    "dicts": (lambda C: {"a": _loader(), "b": _loader(4)}, lambda C: {"a": _loader(), "b": _loader(4)}),
    "combined loaders": (
        lambda C: C({"a": _loader(), "b": _loader(4)}, "min_size"),
        lambda C: C([_loader(), _loader(4)], "sequential"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_stage_loaders_come_back_as_the_program_gave_them(case):
    make_train, make_val = CASES[case]
    theirs = _run("lightning", make_train, make_val, 0)
    ours = _run("trainmesh", make_train, make_val, 0)
    assert ours == theirs
    assert set(theirs) == {"train", "val", "test", "after fit"}


def _reads(framework, make_train, overfit):
    """The first column of every batch training_step gets over 2 epochs, in its structure."""
    Trainer, BoringModel, CombinedLoader = FRAMEWORKS[framework]
    seen = []

    def column(batch):
        if torch.is_tensor(batch):
            return batch[:, 0].tolist()
        if isinstance(batch, dict):
            return {key: column(value) for key, value in batch.items()}
        return type(batch).__name__, [column(value) for value in batch]

    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def training_step(self, batch, batch_idx):
            seen.append(column(batch))
            return self.layer(_first_tensor(batch)).sum()

        def train_dataloader(self):
            return make_train(CombinedLoader)

        validation_step = None

    torch.manual_seed(0)
    trainer = Trainer(max_epochs=2, limit_train_batches=2, overfit_batches=overfit, **QUIET)
    trainer.fit(Model())
    return seen


def _shuffled(n=8):
    data = torch.arange(2.0 * n).view(n, 2)
    return DataLoader(data, sampler=RandomSampler(data), batch_size=2)


READS = {
    "a list of one": (lambda C: [_shuffled()], 0),
    "a list of one, overfit": (lambda C: [_shuffled()], 2),
    "a dict, overfit": (lambda C: {"a": _shuffled(), "b": _shuffled(6)}, 2),
    "a combined loader, overfit": (lambda C: C([_shuffled(), _shuffled(6)], "max_size"), 2),
}


@pytest.mark.parametrize("case", list(READS))
def test_training_step_gets_lightning_s_batches(case):
    make_train, overfit = READS[case]
    theirs = _reads("lightning", make_train, overfit)
    ours = _reads("trainmesh", make_train, overfit)
    assert ours == theirs
    assert len(theirs) == 4
