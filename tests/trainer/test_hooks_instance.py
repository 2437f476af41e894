"""Hooks set on the module instance, as Lightning's ``is_overridden`` reads them (its
tests_pytorch/core/test_datamodules.py::test_train_loop_only): ``model.validation_step = None``
turns validation off (and ``test_step = None`` makes ``test`` refuse), and a function set on the
instance is called. The same under Lightning 2.6 and trainmesh."""

from __future__ import annotations

import pytest

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def instance_hooks(L, root):
    from importlib import import_module

    boring = import_module(
        ("lightning.pytorch" if L.pl.__name__.startswith("lightning") else "trainmesh") + ".demos.boring_classes"
    )
    found = {}
    for name, step in (("none", None), ("function", "set")):
        model = boring.BoringModel()
        calls: list[int] = []
        if step is None:
            model.validation_step = None
        else:
            model.validation_step = lambda batch, batch_idx, seen=calls: seen.append(batch_idx)
        model.test_step = None
        options = dict(
            max_epochs=1, limit_train_batches=2, limit_val_batches=2, logger=False, enable_checkpointing=False
        )
        trainer = L.pl.Trainer(**trainer_kwargs(root / name, num_sanity_val_steps=0, **options))
        trainer.fit(model, datamodule=boring.BoringDataModule())
        try:
            trainer.test(model, datamodule=boring.BoringDataModule())
            tested = "ran"
        except Exception as error:  # noqa: BLE001 - the type is the outcome
            tested = type(error).__name__
        found[name] = {"global_step": trainer.global_step, "val_calls": calls, "test": tested}
    return found


def test_hooks_set_on_the_instance_count_as_lightning(tmp_path):
    """Before: trainmesh called ``validation_step`` = None (TypeError: 'NoneType' object is not callable)."""
    found = run_both(instance_hooks, tmp_path)
    assert found["lightning"]["function"]["val_calls"] == [0, 1]
    assert differences(found["lightning"], found["trainmesh"]) == []
