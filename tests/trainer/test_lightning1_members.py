"""Lightning 1.x's Trainer names that 2.0 removed (trainer/lightning1/trainer_members.py, tune.py), the
DataModule's 1.x argparse face and 1.9's utilities, against pytorch-lightning 1.9.5 itself: the programs of
``tests/helpers/lightning1_programs.py`` were run under 1.9.5 by ``record_lightning_1_9_trainer.py`` (its
own venv), and run here under trainmesh; every value is compared exactly (weights, learning rates and
losses as floats)."""

import json
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_programs as programs
from trainmesh.utilities.refusal import RefusedError

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_trainer.json").read_text())


def run(name, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the 1.x names' notices
        return programs.PROGRAMS[name](*args)


def test_resume_from_checkpoint_resumes_as_lightning_1_9():
    """Trainer(resume_from_checkpoint=epoch-1 checkpoint): the same global_step (32), epoch (4) and
    bit-identical weights as 1.9.5's resumed run (which equal the uninterrupted run's); the property
    holds the path before fit and None after it, as 1.9.5's."""
    got = run("resume")
    assert got == RECORDED["resume"]
    assert got["weights"] == got["whole_weights"]


def test_tune_with_auto_lr_find_as_lightning_1_9():
    """Trainer(auto_lr_find=True).tune(model): the same 100 learning rates and losses, the same
    suggestion written onto model.lr, the weights and global_step as before tuning."""
    assert run("tune_lr") == RECORDED["tune_lr"]


@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_tune_with_auto_scale_batch_size_as_lightning_1_9(mode):
    """Trainer(auto_scale_batch_size=True | "binsearch").tune(model): 1.9.5's size (64, the dataset's
    length; 1.9.5's binsearch keeps it, where 2.x's Tuner takes a 5% margin off) on model.batch_size."""
    assert run(f"tune_batch_size_{mode}") == RECORDED[f"tune_batch_size_{mode}"]


@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_tune_batch_size_search_counts_trials_and_caps_as_lightning_1_9(mode):
    """100 samples from batch size 2, ``max_trials`` 1, 4 and 25: 1.9.5's sizes 4, 32 and 100 (power doubles
    after its last trial, binsearch runs max_trials + 1; a size past the loader's batches is capped at the
    dataset's length), the fit after them (global_step, weights) and the kwargs dict with 1.9.5's "mode" in it.
    Before: 2.x's rules found 2, 16 and 128."""
    assert run(f"tune_batch_size_trials_{mode}") == RECORDED[f"tune_batch_size_trials_{mode}"]


def test_multiple_trainloader_mode_as_lightning_1_9():
    """Trainer(multiple_trainloader_mode="max_size_cycle" | "min_size") with a dict and a list of two
    train loaders (8 and 3 batches): the same batches per step, steps (16 / 6) and weights as 1.9.5."""
    assert run("trainloader_mode") == RECORDED["trainloader_mode"]


def test_trainer_members_as_lightning_1_9():
    """amp_backend, data_parallel, tuning, optimizer_frequencies, prediction_writer_callbacks,
    resume_from_checkpoint, move_metrics_to_cpu's metrics, match_env_arguments and default_attributes:
    1.9.5's values for the same Trainers on CPU."""
    assert run("members") == RECORDED["members"]


def test_members_lightning_1_8_removed_raise_as_lightning_1_9():
    """1.9.5 raises for the members 1.8 removed (AttributeError / NotImplementedError): the same type
    here, the message naming what trainmesh has instead."""
    trainer = tm.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    found = {}
    for name in programs.GRAVEYARD_PROPERTIES + programs.GRAVEYARD_METHODS:
        with pytest.raises(Exception) as error:
            member = getattr(trainer, name)
            member()
        found[name] = type(error.value).__name__
        assert "in trainmesh:" in str(error.value), name
    assert found == RECORDED["graveyard"]


def test_datamodule_argparse_as_lightning_1_9():
    """LightningDataModule.add_argparse_args / parse_argparser / from_argparse_args /
    get_init_arguments_and_types: the same options (defaults, parsers, nargs), parsed values and
    built data modules as 1.9.5 for six command lines."""
    assert run("datamodule_argparse") == RECORDED["datamodule_argparse"]


def test_lightning_1_9_utilities_as_lightning_1_9():
    """parsing.str_to_bool* / flatten_dict, utilities.flatten_dict, memory.get_model_size_mb,
    types.TrainingStep/ValidationStep/TestStep/PredictStep, seed.reset_seed / new_seed_everything /
    pl_worker_init_function: the same values as 1.9.5."""
    assert run("utilities") == RECORDED["utilities"]


def test_what_cannot_be_honoured_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="Lightning 1.x's modes are"):
        tm.Trainer(multiple_trainloader_mode="max_size", logger=False)
    from trainmesh.callbacks import ProgressBar, ProgressBarBase, QuantizationAwareTraining

    assert issubclass(ProgressBarBase, ProgressBar)  # with 1.9's counters (callbacks/test_lightning1_names_bar.py)
    with pytest.raises(RefusedError, match="torch.ao.quantization"):
        QuantizationAwareTraining()


def test_all_gather_grad_stacks_and_hands_back_the_gradient(tmp_path):
    """1.9's utilities.AllGatherGrad on a one-process gloo group: the tensor stacked as [world, ...],
    its gradient this rank's part of the summed gradient (1.9.5's code)."""
    import torch
    import torch.distributed as dist

    from trainmesh.utilities import AllGatherGrad

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        with pytest.warns(FutureWarning, match="all_gather"):
            gathered = AllGatherGrad.apply(x)
        (gathered * torch.tensor([[3.0, 4.0]])).sum().backward()
        assert gathered.tolist() == [[1.0, 2.0]] and x.grad.tolist() == [3.0, 4.0]
    finally:
        dist.destroy_process_group()


def test_track_grad_norm_calls_log_grad_norm_as_lightning_1_9():
    """Trainer(track_grad_norm=2): log_grad_norm called at each of the 8 optimizer steps with 1.9.5's
    norms (rounded to 4 places), and the same metrics in callback_metrics: the step values equal, the
    epoch means within 1 float32 ulp (1.9.5 sums value * batch size in its own order: 1.4676001 here,
    1.4676000 in trainmesh)."""
    got, recorded = run("grad_norm"), RECORDED["grad_norm"]
    assert {k: v for k, v in got.items() if k != "callback_metrics"} == {
        k: v for k, v in recorded.items() if k != "callback_metrics"
    }
    assert got["callback_metrics"] == pytest.approx(recorded["callback_metrics"], rel=2e-7, abs=0)
    steps = {k: v for k, v in got["callback_metrics"].items() if k.endswith("_step") or k == "train_loss"}
    assert steps == {k: recorded["callback_metrics"][k] for k in steps}
    with pytest.raises(ValueError, match="positive number or 'inf'"):
        tm.Trainer(track_grad_norm=0, logger=False)


@pytest.mark.slow  # torch.compile imports dynamo (7 s of CPU here)
def test_from_compiled_and_to_uncompiled():
    """1.9's LightningModule.from_compiled hands the compiled module back (fit takes it as it is;
    nothing is rebound on the module), to_uncompiled gives the module it wraps; other inputs raise
    1.9.5's ValueError."""
    import torch

    model = programs.Regression()
    compiled = torch.compile(model)
    assert programs.Regression.from_compiled(compiled) is compiled
    assert tm.Module.to_uncompiled(compiled) is model
    assert "forward" not in vars(model)
    with pytest.raises(ValueError, match="OptimizedModule"):
        tm.Module.from_compiled(model)
    with pytest.raises(ValueError, match="compiled"):
        tm.Module.to_uncompiled(model)
    with pytest.raises(ValueError, match="expected to be a compiled TwoLoaders"):
        programs.TwoLoaders.from_compiled(compiled)


@pytest.mark.parametrize("name", ["reset_train_dataloader", "reset_val_dataloader", "reset_test_dataloader"])
def test_reset_dataloader_methods_are_refused_with_the_reason(name):
    """1.9.5 has reset_*_dataloader (2.0 removed them); trainmesh keeps no loader on the Trainer to reload."""
    trainer = tm.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(NotImplementedError, match="1.9.5 loads the loaders here"):
        getattr(trainer, name)(programs.Regression())


def test_tune_then_fit_resumes_from_checkpoint_as_lightning_1_9():
    """Trainer(resume_from_checkpoint=epoch-0 checkpoint, auto_lr_find=True): tune's search starts from the
    checkpoint's weights at step 0 (1.9.5's search is a fit that restores the weights before on_fit_start and
    its training state after it) and leaves them on the model, keeping the path; the fit after it resumes:
    1.9.5's search losses, lr on the model, global_step (16) and bit-identical weights. Before, trainmesh
    searched from the model's own weights (first loss 10.81 where 1.9.5's is 2.67)."""
    assert run("resume_after_tune") == RECORDED["resume_after_tune"]


def test_accumulate_grad_batches_dict_schedules_as_lightning_1_9():
    """Trainer(accumulate_grad_batches={0: 1, 1: 3}), 1.x's per-epoch factors: 1.9.5's optimizer steps (13 + 5 +
    5), factors after each epoch (1, 3, 3) and weights. Before: refused as not an integer."""
    assert run("accumulate_dict") == RECORDED["accumulate_dict"]
