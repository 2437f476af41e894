"""trainer/lightning1/accumulation.py: the GradientAccumulationScheduler pytorch-lightning 1.9.5 lists in every
Trainer of a 1.x run, against 1.9.5's recording (helpers/lightning1_callback_lists.py,
helpers/lightning_1_9_callback_lists.json)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from helpers import lightning1_callback_lists as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "helpers" / "lightning_1_9_callback_lists.json").read_text()
)["measured"]


def _run(name: str):
    import trainmesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(programs, name)(trainmesh)


def test_a_1x_trainer_lists_1_9_5_s_accumulation_scheduler():
    """Each 1.x Trainer's callbacks (int and dict accumulation, a program's callbacks or scheduler,
    from_argparse_args, a plain Trainer after fitting a 1.x module) hold 1.9.5's scheduler where 1.9.5's do,
    with its factor and scheduling. Before: listed only for a dict, and before the summary."""
    found = _run("callback_lists")
    for case in found.values():  # the default summary is RichModelSummary where rich is installed (2.x's choice)
        case["callbacks"] = ["ModelSummary" if name == "RichModelSummary" else name for name in case["callbacks"]]
    assert found == RECORDED["callback_lists"]


def test_a_1x_run_s_callbacks_read_the_epoch_s_factor_as_1_9_5():
    """accumulate_grad_batches={0: 2, 2: 3}: 1.9.5's Trainer reads 2 before the fit and a callback's
    on_train_epoch_start reads 2, 2, 3 (its fit loop applies the scheduler first); same steps and weights.
    Before: 1, then 1, 2, 2."""
    assert _run("epoch_factors") == RECORDED["epoch_factors"]


def test_the_scheduler_a_1x_trainer_lists_refuses_no_manual_optimization():
    """1.9.5's listed scheduler refuses nothing: a manual-optimization module trains (2.x's callback raises)."""
    assert _run("manual_with_listed_scheduler") == RECORDED["manual_with_listed_scheduler"]


def test_a_csv_logger_s_hparams_after_tune_are_1_9_5_s():
    """hparams.yaml after trainer.tune (which changed hparams.batch_size) and the fit: the values 1.9.5
    writes (the hparams as the module was made: no file during the search)."""
    assert _run("hparams_after_tune") == RECORDED["hparams_after_tune"]


def test_a_1x_run_s_csv_logger_writes_hparams_yaml_as_1_9_5():
    """A 1.x module that saved no hyperparameters: 1.9.5's CSVLogger writes ``hparams.yaml`` (``{}``) beside
    metrics.csv; Lightning 2's writes none. Before: none in the 1.x run either."""
    assert _run("csv_files_without_hparams") == RECORDED["csv_files_without_hparams"]
    import trainmesh

    assert programs.csv_files_without_hparams(trainmesh, lightning1=False) == {}


def test_a_2x_trainer_lists_no_scheduler():
    """A Trainer spelled as 2.x's, before any 1.x fit, lists none (Lightning 2.6's list)."""
    import trainmesh

    trainer = trainmesh.Trainer(accumulate_grad_batches=2, logger=False, enable_progress_bar=False)
    assert not any(type(cb).__name__ == "GradientAccumulationScheduler" for cb in trainer.callbacks)


@pytest.mark.parametrize("factor", [2, {0: 2}])
def test_a_1x_trainer_s_own_scheduler_with_manual_optimization_still_refuses_accumulation(factor):
    """Accumulating with manual optimization stays refused (1.9.5's configuration check)."""
    import trainmesh

    trainer = trainmesh.Trainer(
        gpus=0, max_epochs=1, accumulate_grad_batches=factor, enable_checkpointing=False, **programs.QUIET
    )
    with warnings.catch_warnings(), pytest.raises(Exception, match="Automatic gradient accumulation"):
        warnings.simplefilter("ignore")
        trainer.fit(programs._module(trainmesh, manual=True))
