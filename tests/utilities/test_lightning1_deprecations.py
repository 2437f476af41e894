"""pytorch-lightning 1.9.5's deprecated names a published program still uses, against 1.9.5 recorded as data
(``tests/helpers/record_lightning_1_9_deprecations.py`` writes ``lightning_1_9_deprecations.json`` in 1.9.5's
own venv; the program is ``tests/helpers/lightning1_deprecations.py``), from 1.9.5's own
tests_pytorch/deprecated_api/test_remove_2-0.py:

- ``trainmesh.utilities.distributed`` (``from pytorch_lightning.utilities.distributed import rank_zero_only``,
  as the latent-diffusion models import it; ``sync_ddp_if_available``, ``gather_all_tensors``, ...) and
  ``trainmesh.utilities.cloud_io`` (``load as pl_load``, ``get_filesystem``, ``atomic_save``): 1.9.5's values
  on one process and on a one-process gloo group, each with 1.9.5's deprecation line;
- which 1.x Trainer arguments and members warn a deprecation (``gpus=``, ``num_processes=``,
  ``resume_from_checkpoint=``, ``amp_backend=``, ``trainer.resume_from_checkpoint``), a ``FutureWarning`` here
  where 1.9.5 warns a ``DeprecationWarning`` (both caught by ``pytest.deprecated_call``).

Two deliberate differences: ``sync_ddp(x)`` without ``reduce_op`` sums, as 1.9.5 documents it (its code
passes ``op=None`` to torch, which raises a TypeError under torch 2.13); ``replace_sampler_ddp=False`` (1.9.5:
silent) is today's ``use_distributed_sampler=False`` with trainmesh's line naming it, as for every 1.x spelling.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from helpers.lightning1_deprecations import measure

RECORDED = Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_deprecations.json"


@pytest.fixture(scope="module")
def both():
    theirs = json.loads(RECORDED.read_text())["measured"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = measure("trainmesh")
    return theirs, ours


def test_utilities_distributed_answers_as_1_9_5(both):
    theirs, ours = both
    their_group, our_group = theirs["distributed"].pop("group"), ours["distributed"].pop("group")
    assert ours["distributed"] == theirs["distributed"]
    # documented as a sum in 1.9.5; its code hands torch op=None, which torch 2.13 refuses
    assert their_group.pop("sync_sum") == ["raised TypeError", True]
    assert our_group.pop("sync_sum") == [4.0, True]
    assert our_group == their_group


def test_utilities_cloud_io_answers_as_1_9_5(both):
    theirs, ours = both
    assert ours["cloud_io"] == theirs["cloud_io"]


def test_lightning_one_trainer_arguments_warn_a_deprecation_as_1_9_5(both):
    theirs, ours = both
    assert theirs["trainer"].pop("replace_sampler_ddp") is False  # 1.9.5: not deprecated yet
    assert ours["trainer"].pop("replace_sampler_ddp") is True  # trainmesh: today's use_distributed_sampler=False
    assert ours["trainer"] == theirs["trainer"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures a machine without CUDA, as 1.9.5 was recorded on")
def test_asking_for_a_missing_gpu_raises_misconfiguration_as_1_9_5(both):
    """Trainer(gpus=1) / gpus="0," / accelerator="gpu" without CUDA: caught by ``except
    MisconfigurationException`` as under 1.9.5 (before: a plain ValueError slipped past it)."""
    theirs, ours = both
    assert ours["no_gpu"] == theirs["no_gpu"] == dict.fromkeys(theirs["no_gpu"], "MisconfigurationException")


def test_on_predict_epoch_end_with_results_gets_the_predictions_as_1_9_5(both):
    """A 1.x ``on_predict_epoch_end(self, results)`` (and a callback's ``(trainer, pl_module, outputs)``) gets
    the predictions, a list per loader (``[[...]]`` for one), as 1.9.5 (before: a TypeError, nothing passed)."""
    theirs, ours = both
    assert ours["predict_epoch_end"] == theirs["predict_epoch_end"]


def test_truncated_bptt_steps_defaults_to_0_as_1_9_5(both):
    """A 1.x module reading ``self.truncated_bptt_steps`` without setting it gets 0 (1.9.5's default; before: an
    AttributeError)."""
    theirs, ours = both
    assert ours["tbptt_default"] == theirs["tbptt_default"] == [0, 2]


def test_replace_sampler_ddp_false_is_use_distributed_sampler_false():
    """1.x's name for 2.x's switch: the same behaviour (each loader's own sampler under ddp)."""
    import trainmesh as tm

    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    with pytest.warns(FutureWarning, match="use_distributed_sampler=False"):
        old = tm.Trainer(replace_sampler_ddp=False, **quiet)
    assert old._behaviour == tm.Trainer(use_distributed_sampler=False, **quiet)._behaviour
    assert tm.Trainer(**quiet)._behaviour.use_distributed_sampler is True


def test_a_lightning_one_backward_override_calling_super_trains_as_1_9_5(both):
    """``def backward(self, loss, optimizer, optimizer_idx): super().backward(loss, optimizer, optimizer_idx)``:
    1.x's default took the two and did not hand them to ``loss.backward`` (before: a TypeError from torch)."""
    theirs, ours = both
    assert ours["backward_super"].keys() == theirs["backward_super"].keys()
    for name, values in theirs["backward_super"].items():
        assert ours["backward_super"][name] == pytest.approx(values, abs=1e-6)


def test_training_epoch_end_gets_1_9_5_s_outputs(both):
    """1.x's ``training_epoch_end(outputs)``: one ``{"loss": ...}`` dict per batch for a returned tensor (the loss
    backward ran on, detached: divided under accumulation), a batch returning None left out, 1.x's per-optimizer
    lists, under manual optimization too; an override's ``super().training_epoch_end(outputs)`` runs 1.9.5's
    default (trainmesh's Module had none); ``on_train_batch_end`` gets each detached (trainmesh gave the returned tensors themselves, kept None,
    and handed the optimizer turns' losses with their graphs). A None batch's ``on_train_batch_end`` outputs
    are 2.6's ``{}`` (1.9.5: ``[]``), the rule for a name both releases have."""
    theirs, ours = both
    for kind in ("none_on_odd", "manual_none_on_odd"):
        their_none, our_none = theirs["epoch_outputs"][kind], ours["epoch_outputs"][kind]
        assert [their_none[1], their_none[3]] == [[], []] and [our_none[1], our_none[3]] == [{}, {}]
        their_none[1] = their_none[3] = our_none[1] = our_none[3] = None
    assert ours["epoch_outputs"] == theirs["epoch_outputs"]


def test_evaluation_epoch_end_outputs_leave_out_none_as_1_9_5(both):
    """1.x's ``validation_epoch_end`` / ``test_epoch_end``: the steps' outputs less the None ones (trainmesh
    kept each None), one list per loader; an evaluation batch hook with a required ``dataloader_idx`` gets 0 for
    one loader, as 1.x passed it (2.x passes none: a TypeError before)."""
    theirs, ours = both
    assert ours["evaluation_outputs"] == theirs["evaluation_outputs"]


def test_step_end_returning_none_goes_on_with_the_step_s_output_as_1_9_5(both):
    """A 1.x ``training_step_end`` / ``validation_step_end`` / ``test_step_end`` that only logs (returns None):
    1.9.5 goes on with what the step returned, so the loss trains and the epoch-end hooks get the steps'
    outputs. trainmesh took the None as a skipped batch: no step ran (a dense classifier stayed at 10%
    accuracy where 1.9.5 reached 84%, silently) and the epoch-end hooks got nothing."""
    theirs, ours = both
    assert ours["step_end_none"] == theirs["step_end_none"]


def test_strategy_optimizer_step_from_a_1x_optimizer_step_steps_as_1_9_5(both):
    """``self.trainer.strategy.optimizer_step(optimizer, optimizer_idx, optimizer_closure)`` at the end of a 1.x
    ``optimizer_step`` override (a warm-up): the same steps, weights and hook calls as 1.9.5, whose precision
    plugin and optimizer each wrap the closure with on_before_optimizer_step and the clipping (twice a step).
    trainmesh's strategies had no ``optimizer_step``: an AttributeError at the first step."""
    theirs, ours = both
    assert ours["strategy_optimizer_step"] == theirs["strategy_optimizer_step"]


def test_trainer_arguments_removed_before_1_9_are_refused_saying_what_replaced_them(both):
    """``Trainer(progress_bar_refresh_rate=0)``, ``checkpoint_callback=False``, ``reload_dataloaders_every_epoch``
    and the other arguments Lightning removed before 1.9 (common in ported programs): 1.9.5's TypeError, and
    trainmesh's message says what replaced each (it said only "unexpected keyword argument")."""
    theirs, ours = both
    their_types = {name: found[0] for name, found in theirs["removed_trainer_arguments"].items()}
    our_types = {name: found[0] for name, found in ours["removed_trainer_arguments"].items()}
    assert our_types == their_types == dict.fromkeys(their_types, "TypeError")
    for name, (_, message) in ours["removed_trainer_arguments"].items():
        assert f"keyword argument {name!r}" in message and "1.9.5 refuses it too); today: " in message, message


def test_on_train_epoch_end_requiring_outputs_stops_before_training(both):
    """``on_train_epoch_end(self, outputs)`` (Lightning passed them until 1.5): 1.9.5 raises a TypeError at the
    first epoch's end, after the epoch trained; trainmesh raises the same type at fit's start, before any batch
    (it raised 1.9.5's bare error at the same late point), saying what replaces it."""
    theirs, ours = both
    assert theirs["epoch_end_with_outputs"] == {"raised": "TypeError", "steps_before": 2}
    assert ours["epoch_end_with_outputs"] == {"raised": "TypeError", "steps_before": 0}


def test_utilities_seed_functions_warn_a_deprecation_as_1_9_5():
    """``from pytorch_lightning.utilities.seed import seed_everything`` (and ``reset_seed``,
    ``pl_worker_init_function``): 1.9.5's deprecation line, ours a ``LightningOneName`` naming today's home
    (before: silent); ``isolate_rng`` is silent in both."""
    from helpers.lightning1_leftovers import seed_functions

    theirs = json.loads(RECORDED.read_text())["leftovers"]["seed_functions"]
    assert seed_functions("trainmesh") == theirs == {**dict.fromkeys(theirs, True), "isolate_rng": False}


def test_weights_summary_and_distributed_backend_run_where_1_9_5_refuses_them():
    """A deliberate difference: 1.9.5 refuses ``Trainer(weights_summary=...)`` and
    ``Trainer(distributed_backend=...)`` (TypeError; 1.5 removed them), but the documents trainmesh was made
    from (its seed documents: ``distributed_backend='dp'``, ``weights_summary=None``) spell them, so they run
    as their meaning, each with a ``LightningOneName`` line (docs/how-to/lightning-1x.md)."""
    import trainmesh as tm
    from helpers.lightning1_leftovers import old_trainer_arguments

    theirs = json.loads(RECORDED.read_text())["leftovers"]["old_trainer_arguments"]
    assert theirs == {"weights_summary": "TypeError", "distributed_backend": "TypeError"}
    assert old_trainer_arguments(tm.Trainer) == dict.fromkeys(theirs, "built")


def test_a_lightning1_module_logging_integers_hears_1_9_5_s_words():
    """1.9.5 warns "needs to be floating point" for an integer tensor, a Python int and a bool a 1.x module
    logs (a Python number became an int64 tensor there); Lightning 2.6, and trainmesh before, said 2.6's
    longer words for the tensor only. The values: float32, as both."""
    import trainmesh
    from helpers.lightning1_leftovers import log_integers

    theirs = json.loads(RECORDED.read_text())["leftovers"]["log_integers"]
    assert log_integers(trainmesh) == theirs


def test_trainer_tune_says_1_9_5_s_lines_about_its_trials():
    """``trainer.tune`` with ``auto_scale_batch_size``: 1.9.5's "Batch size N succeeded, trying batch size M"
    for each trial and its words for the temporary checkpoint ("... from the checkpoint file at");
    trainmesh said only the closing line before."""
    import trainmesh
    from helpers.lightning1_leftovers import tune_lines

    theirs = json.loads(RECORDED.read_text())["leftovers"]["tune_lines"]
    assert tune_lines(trainmesh) == theirs
