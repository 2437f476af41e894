"""``trainmesh.demos`` (Lightning 2.6's ``lightning.pytorch.demos``, which bug reports and published
examples import: ``from lightning.pytorch.demos import BoringModel``) against Lightning's own: the
same program, ported by renaming the import, trains the same weights and logs the same metrics."""

from __future__ import annotations

import importlib

import pytest

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def demos(L):
    """``lightning.pytorch.demos`` or its port ``trainmesh.demos``."""
    return importlib.import_module(L.pl.__name__ + ".demos")


def boring_fit_test(L, root):
    """BoringModel and ManualOptimBoringModel: fit, validate in it, test; BoringDataModule's four loaders."""
    found = []
    for model in (demos(L).BoringModel(), demos(L).boring_classes.ManualOptimBoringModel()):
        settings = dict(max_epochs=2, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2)
        logger = L.loggers.CSVLogger(root, name=type(model).__name__)
        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=logger, enable_checkpointing=False, **settings))
        trainer.fit(model)
        tested = trainer.test(model)
        found.append((outcome(trainer, model, root), tested))
    data = demos(L).BoringDataModule()
    data.setup("fit")
    found.append([len(loader) for loader in (data.train_dataloader(), data.val_dataloader())])
    return found


def test_boring_models_train_as_lightnings_demos(tmp_path):
    found = run_both(boring_fit_test, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"][0][0]["global_step"] == 6
