"""A pytorch-lightning 1.x run's ``trainer.tuner`` and ``trainer.tune`` as 1.9.5's (``trainer/lightning1/tuner.py``),
compared with 1.9.5's run of the same programs (``helpers/lightning1_tuner_programs.py``, recorded by
``helpers/record_lightning_1_9_tuner.py``): the value found, the finder's results and suggestion, the model's
attribute, the Trainer's state after, the module's hook calls and the weights a fit trains after a tune.

Before: ``trainer.tuner`` was Lightning 2.6's (``scale_batch_size(model, max_trials=2)`` found 4 where 1.9.5
finds 8, and the other size trained; ``lr_find`` wrote its 2.x suggestion by default), and ``trainer.tune``
ran each batch-size trial as a fit of its own (``setup``, ``configure_optimizers``, ``on_fit_start`` and
``on_fit_end`` once a trial) and the learning-rate search as a fit calling ``on_fit_start`` / ``on_fit_end``
but no ``on_save_checkpoint`` / ``on_load_checkpoint``: 1.9.5 runs each search in one fit that ends after it.
"""

import json
import warnings
from pathlib import Path

import pytest

import trainmesh
from helpers import lightning1_tuner_programs as programs

RECORDED = json.loads((Path(__file__).parents[2] / "helpers" / "lightning_1_9_tuner.json").read_text())["measured"]


def _run(function, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(json.dumps(getattr(programs, function)(trainmesh, **kwargs)))


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("power", {"max_trials": 2}),
        ("binsearch", {"mode": "binsearch", "max_trials": 2, "steps_per_trial": 2, "init_val": 3}),
    ],
)
def test_trainer_tuner_scale_batch_size_is_1_9_5_s(name, kwargs):
    assert _run("scale_batch_size", **kwargs) == RECORDED[name]


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("lr_find", {"num_training": 18, "max_lr": 50.0, "early_stop_threshold": None}),
        ("lr_find_update", {"num_training": 18, "min_lr": 1e-4, "max_lr": 0.5, "mode": "linear", "update_attr": True}),
    ],
)
def test_trainer_tuner_lr_find_is_1_9_5_s(name, kwargs):
    assert _run("lr_find", **kwargs) == RECORDED[name]


def test_trainer_tune_then_fit_calls_the_hooks_and_trains_the_weights_of_1_9_5():
    assert _run("tune_then_fit", auto_lr_find=True, auto_scale_batch_size="binsearch") == RECORDED["tune_both"]


@pytest.mark.parametrize(
    "finders,recorded", [({}, "tune_setup_lr"), ({"auto_scale_batch_size": True}, "tune_setup_both")]
)
def test_trainer_tune_sets_the_callbacks_and_module_up_once_a_search_as_1_9_5(finders, recorded):
    """(``helpers/lightning1_owner_items.py``'s program: each search a fit of its own, the run's callbacks
    given ``setup`` / ``teardown`` around it and no other hook; before, each batch-size trial was a fit calling
    the module's ``setup`` again and the callbacks' not at all.)"""
    from helpers.lightning1_owner_records import RECORDED as OWNER_ITEMS
    from helpers.lightning1_owner_records import under_trainmesh

    got = under_trainmesh("tune_setup_calls", auto_lr_find=True, **finders)
    assert got == OWNER_ITEMS[recorded]


def test_a_checkpoint_after_a_1x_tune_lands_in_the_run_s_logger_folder_as_1_9_5():
    """After ``trainer.tune(auto_lr_find=True)`` a default ModelCheckpoint saves the fit's checkpoints in the
    logger's version folder, as 1.9.5's (its DummyLogger comes only as the search starts; found on
    stanton119/data-analysis's probabilistic regression: before, ``default_root_dir/checkpoints``)."""
    from helpers import lightning1_more_programs

    recorded = json.loads((Path(__file__).parents[2] / "helpers" / "lightning_1_9_more_programs.json").read_text())
    got = lightning1_more_programs.checkpoint_folder_after_tune(trainmesh)
    assert got == recorded["measured"]["checkpoint_folder_after_tune"]


def test_a_program_s_own_tuner_on_a_1x_trainer_searches_as_1_9_5():
    """``Tuner(trainer)`` built by the program (1.x's ``pytorch_lightning.tuner.tuning.Tuner``) on a Trainer
    spelled for 1.x: 1.9.5's searches, as ``trainer.tuner``. Before, Lightning 2.6's: ``max_trials=2`` found 4
    where 1.9.5 finds 8, and ``lr_find`` wrote its suggestion to ``model.lr`` (1.9.5's default
    ``update_attr=False`` leaves it); a published-style program then trained on batch 8 where 1.9.5's on 16."""
    assert _run("tuner_built") == RECORDED["tuner_built"]


def test_finder_callbacks_on_a_1x_trainer_search_as_1_9_5():
    """``BatchSizeFinder`` / ``LearningRateFinder`` among the callbacks of a Trainer spelled for 1.x search by
    1.9.5's rules (``max_trials=2`` from 2 ends on 8) and leave ``model.lr`` (1.9.5's
    default ``update_attr=False``). Before, 2.6's: 4, the suggestion written to ``model.lr``, the fit on batch 4."""
    assert _run("finder_callbacks") == RECORDED["finder_callbacks"]


def test_a_1x_run_s_batch_size_finder_with_margin_stops_with_the_reason():
    """1.9.5's ``BatchSizeFinder`` has no ``margin`` / ``max_val``: a 1.x run follows its search, so a value for
    either stops before the search rather than being dropped."""
    calls: list = []
    model = programs._module(trainmesh, calls)
    finder = trainmesh.callbacks.BatchSizeFinder(mode="binsearch", margin=0.2, max_trials=2)
    trainer = trainmesh.Trainer(gpus=0, max_epochs=1, logger=False, callbacks=[finder], **programs.QUIET)
    with pytest.raises(ValueError, match="1.9.5's BatchSizeFinder has no margin or max_val"):
        trainer.fit(model)


def test_a_1x_search_validates_before_its_first_batch_as_1_9_5():
    """1.9.5's searches (``trainer.tuner``'s, the finder callbacks') run their fit loop from a restored state
    and validate before the first batch; with a shuffled train loader that moves its generator. Before:
    no first validation, so the search's losses differed from the first step (p1: 1.1528 vs 1.1666)."""
    assert _run("lr_find_validating") == RECORDED["lr_find_validating"]


@pytest.mark.parametrize("finder", ["sizes", "rates", "both"])
def test_a_1x_fit_validates_the_batches_its_finder_searched_with_as_1_9_5(finder):
    """1.9.5's finder callbacks give ``limit_val_batches`` back after their search but keep the validation
    loaders it set up, counted with ``steps_per_trial`` / ``num_training``: the fit (its sanity check too)
    validates 2 / 4 of the 10 batches until ``reload_dataloaders_every_n_epochs`` asks for them again.
    With both finders the learning-rate search validates the batch-size search's 2 too. Before: the fit asked
    ``val_dataloader()`` again and validated all 10 (other ``val_loss``); each search's trials asked again."""
    assert _run("finder_then_validation", finder=finder) == RECORDED[f"{finder}_then_validation"]
