"""trainmesh.keras at 2 gloo processes: Keras' own model.fit in each, against one process.

keras_run.py's ddp run (in 2 processes started as strategy="ddp" starts them: the Keras programs'
launch, conftest.py) fits eleven legs one after another: the keras-io guide's convnet without BatchNormalization/Dropout under
SGD and Adam, the guide's convnet itself with writing callbacks, a class_weight classifier, a
two-headed model with sample_weight, weighted_metrics, loss_weights, validation_steps and
verbose=2, and the classifier with the optimizer's EMA and SwapEMAWeights, then fed by a PyDataset
and by DataLoaders (one of 101 samples, with validation_steps), then with global_clipnorm and
gradient_accumulation_steps, and with a train_step of its own reading sample_weight (and, first, a tiny fit on a shuffled DataLoader recording the samples each
rank reads, and the classifier leg again through `with tk.distribute(...)`). Each is compared here
with Keras' own model.fit in this process at the global batch (2 x 16), or between the ranks. A
second program loads the saved convnet in plain Keras (before it imports trainmesh), then runs the
convnet and a model of the program's own classes (layer, metric, model) under ddp_spawn, and the
classifier under ddp_fork.
"""

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parent
SCRIPT = HERE / "keras_run.py"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from helpers.processes import run_program  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


def program(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return run_program([str(SCRIPT), *args], timeout=timeout, env={"KERAS_BACKEND": "torch"}, cwd=HERE)


def launched(mode: str, root: Path, *args: str) -> Path:
    result = program(mode, str(root), *args)
    assert result.returncode == 0, f"keras_run.py {mode} failed:\n{result.stderr[-4000:]}"
    return root


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    """keras_run.py's ddp run (a leg of the Keras programs' one launch: conftest.py)."""
    return keras_ddp_programs("keras_run")


@pytest.fixture(scope="module")
def spawned(ddp, tmp_path_factory) -> Path:
    """The spawn program, which first loads the ddp run's saved guide.keras in plain Keras (before it
    imports trainmesh) and predicts the held-out images: OUT/loaded_pred.npy."""
    root = tmp_path_factory.mktemp("keras_spawn")
    load = (ddp / "guide.keras", ddp / "held_out.npy", root / "loaded_pred.npy")
    return launched("spawn", root, *map(str, load))


def rank(root: Path, leg: str, r: int) -> dict:
    return torch.load(root / f"{leg}.rank{r}", weights_only=False)


@functools.cache
def one_process(leg: str) -> tuple[dict, dict, dict]:
    """Keras' own model.fit in this process, at the global batch of the 2 processes: its variables,
    History and params (kept: several tests compare with the same leg's run)."""
    import keras_run

    model, x, y, arguments = keras_run.fit_arguments(leg, 2 * keras_run.BATCH)
    history = model.fit(x, y, **{**arguments, "verbose": 0})
    return keras_run.variables(model), history.history, dict(history.params)


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


# guide: the convnet with BatchNormalization and Dropout (Adam), each layer normalising with the global
# batch's moments and each process drawing its rows of one process's Dropout masks (batch_statistics.py,
# draws.py; before: every process normalised its own half and drew the first rows)
LEG_TOLERANCES = [("plain_sgd", 1e-5), ("plain_adam", 1e-4), ("guide", 1e-4), ("classifier", 1e-5)] + [
    (leg, 1e-5) for leg in ("weighted", "ema", "pydataset", "loader", "loader_odd", "clipped", "weighted_step")
]


@pytest.mark.parametrize(("leg", "tolerance"), LEG_TOLERANCES)
def test_two_processes_train_what_one_trains_at_the_global_batch(ddp, leg, tolerance):
    """Every variable of each rank within the issue's bound of one process at batch 32 (the convnet
    without BN/Dropout; the classifier with class_weight and SGD momentum; the two-headed model with
    sample_weight and loss_weights; the classifier ending on its EMA weights); the ranks bit-identical."""

    zero, one = rank(ddp, leg, 0), rank(ddp, leg, 1)
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    expected, _, _ = one_process(leg)
    assert largest_difference(zero["variables"], expected) < tolerance


@pytest.mark.parametrize("leg", ["plain_sgd", "plain_adam", "classifier"])
def test_validation_metrics_are_those_of_the_whole_validation_set(ddp, leg):
    """History is the same on both ranks, and its last val_* values equal Keras' one-process
    evaluate of rank 0's final weights on the whole validation split (metric states summed, not
    per-rank results averaged: Precision/Recall of the classifier would differ otherwise)."""
    import keras_run

    zero, one = rank(ddp, leg, 0), rank(ddp, leg, 1)
    assert zero["history"] == one["history"]
    model, x, y, _ = keras_run.fit_arguments(leg, 2 * keras_run.BATCH)
    for variable in model.variables:
        variable.assign(zero["variables"][variable.path])
    split = int(len(x) * 0.8)
    expected = model.evaluate(x[split:], y[split:], verbose=0, return_dict=True)
    for name, value in expected.items():
        assert zero["history"][f"val_{name}"][-1] == pytest.approx(value, rel=1e-6, abs=1e-7), name
    assert len(zero["history"]["loss"]) == keras_run.EPOCHS


@pytest.mark.parametrize("leg", ["weighted", "ema", "pydataset", "loader", "loader_odd", "clipped", "weighted_step"])
def test_histories_equal_one_process(ddp, leg):
    """Every History entry (weighted metrics, per-head losses, val_* over validation_steps=1 of
    validation_batch_size 8 per process = one step of 16; with SwapEMAWeights: of the EMA weights;
    a PyDataset's or DataLoader's batches split over the processes; a DataLoader of 101 samples with
    validation_steps=1 of a validation DataLoader of 4 batches of 8: each epoch the next 16 samples, as one
    process reads the next batch of 16 (before: rank 1 read from the middle, val_loss 0.6244 where one
    process has 0.7006); global_clipnorm with gradient_accumulation_steps=2, clipping the averaged
    gradient, and steps_per_epoch=3 of the 4 batches (the second epoch goes on from the fourth); a
    train_step of the model's own weighing by sample_weight and calling apply_gradients, with AUC and a
    metric class of its own, training and validation) within 1e-5 of one process at batch 32, equal on
    both ranks; params["steps"] is one process's count, not doubled."""
    zero, one = rank(ddp, leg, 0), rank(ddp, leg, 1)
    assert zero["history"] == one["history"]
    _, history, params = one_process(leg)
    assert zero["params"]["steps"] == one["params"]["steps"] == params["steps"] == (3 if leg == "clipped" else 4)
    assert zero["history"].keys() == history.keys()
    if leg == "weighted_step":
        assert {"auc", "own_true_positives", "val_auc", "val_own_true_positives"} <= history.keys()
    for name, values in history.items():
        assert zero["history"][name] == pytest.approx(values, rel=1e-5, abs=1e-7), name


@pytest.mark.parametrize("leg", ["pydataset", "loader"])
def test_evaluate_and_predict_split_a_pydataset_and_a_dataloader(ddp, leg):
    """tk.evaluate at 2 processes on a PyDataset (every 2nd batch each) or a DataLoader (a run of its
    batches each): Keras' evaluate of rank 0's weights on all the batches in one process. tk.predict
    (a run of the batches each): Keras' predictions, bit-identical, in order, on both ranks (before: refused)."""
    import keras_run

    zero, one = rank(ddp, leg, 0), rank(ddp, leg, 1)
    assert zero["evaluate"] == one["evaluate"]
    model, _, _, arguments = keras_run.fit_arguments(leg, keras_run.BATCH)
    for variable in model.variables:
        variable.assign(zero["variables"][variable.path])
    expected = model.evaluate(arguments["validation_data"], verbose=0, return_dict=True)
    assert zero["evaluate"].keys() == expected.keys()
    for name, value in expected.items():
        assert zero["evaluate"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name
    assert isinstance(zero["predict"], np.ndarray), zero["predict"]
    predicted = model.predict(arguments["validation_data"], verbose=0)
    assert zero["predict"].shape == predicted.shape == (32, 1)
    np.testing.assert_array_equal(zero["predict"], predicted)
    np.testing.assert_array_equal(one["predict"], predicted)


def test_evaluate_and_predict_steps_read_the_first_batches_as_one_process(ddp):
    """tk.evaluate(steps=1) and tk.predict(steps=1) at 2 processes of a DataLoader of 4 batches of 8, and
    tk.predict(steps=1) of a PyDataset of them: the first 16 samples, Keras' evaluate and predict of one
    process at batch 16 with steps=1, on both ranks (before: rank 1 read batch 2, not batch 1: loss 0.6244
    where one process has 0.7006, predictions off by up to 0.57)."""
    import keras_run

    zero, one = rank(ddp, "loader_odd", 0), rank(ddp, "loader_odd", 1)
    assert zero["evaluate_steps"] == one["evaluate_steps"]
    model, _, _, arguments = keras_run.fit_arguments("loader_odd", 2 * keras_run.BATCH)
    for variable in model.variables:
        variable.assign(zero["variables"][variable.path])
    validation = arguments["validation_data"]
    expected = model.evaluate(validation, steps=1, verbose=0, return_dict=True)
    assert zero["evaluate_steps"].keys() == expected.keys()
    for name, value in expected.items():
        assert zero["evaluate_steps"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name
    predicted = model.predict(validation, steps=1, verbose=0)
    assert predicted.shape == (16, 1)
    for key in ("predict_steps", "predict_pydataset_steps"):
        np.testing.assert_array_equal(zero[key], one[key])
        np.testing.assert_allclose(zero[key], predicted, rtol=1e-6, atol=1e-7)


def test_a_train_step_that_applies_no_keras_optimizer_is_stopped_after_its_first_step(ddp):
    """A train_step stepping a torch optimizer (trainmesh averages gradients in Keras' optimizer apply only):
    stopped on both ranks after one of its 4 steps, with what to use instead (before: each rank trained
    its own model on its own half, silently). One applying an optimizer of its own whose class overrides
    apply (it clips) to gradients of torch.autograd.grad (averaged only below the override): refused before
    training, by step_probe.py (no .grad to probe; refuse_own_apply would stop its first apply). The step's
    own counter also counts the 3 calls of step_probe.py's probe before training (a mean loss: not
    refused). The same ClippingSGD compiled, under Keras' own train_step (its
    gradients averaged as loss.backward() ends, before its apply clips them), trains one process's model at
    16 (before: refused before start, as every apply override was)."""
    import keras_run

    for r in (0, 1):
        got = rank(ddp, "torch_optimizer", r)
        assert got["steps"] == 3 + 1
        assert "without applying gradients through a Keras optimizer's apply" in got["error"]
        assert "self.optimizer.apply(gradients, self.trainable_weights)" in got["error"]
        assert "train_step is not a mean over the batch's samples" in got["own_apply_error"]
    x, y = keras_run.get_tabular(64)
    expected = keras_run.clipping_fit(x, y.astype("float32"), batch=16)
    for mine, theirs in zip(rank(ddp, "torch_optimizer", 0)["clipping"], expected, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-6)


def test_a_shuffled_dataloader_is_split_anew_each_epoch(ddp):
    """DataLoader(shuffle=True) at 2 processes: in each epoch the ranks read disjoint halves of the 32
    samples (one permutation, split), and the second epoch is shuffled differently from the first
    (its DistributedSampler's epoch is set as each epoch begins)."""
    zero, one = rank(ddp, "shuffled", 0), rank(ddp, "shuffled", 1)
    for epoch in (0, 1):
        assert len(zero[epoch]) == len(one[epoch]) == 16
        assert sorted(zero[epoch] + one[epoch]) == list(range(32))
    assert zero[0] != zero[1]


def test_shuffled_arrays_are_one_permutation_of_all_the_samples(ddp):
    """shuffle=True on arrays at 2 processes reads, each epoch, one permutation of all 32 samples (the one
    Keras' own fit at the global batch draws: test_batch_metrics.py's ``shuffled``), rank r its samples r,
    r + 2, ...; before: Keras' own shuffle of each process's share (rank 0 the even samples, rank 1 the odd,
    samples 2i and 2i+1 always in one global batch)."""
    zero, one = rank(ddp, "shuffled_arrays", 0), rank(ddp, "shuffled_arrays", 1)
    for epoch in (0, 1):
        assert sorted(zero[epoch] + one[epoch]) == list(range(32))
        assert any(sample % 2 for sample in zero[epoch])
        assert one[epoch] != [sample + 1 for sample in zero[epoch]]
    assert zero[0] != zero[1]


def test_a_distribute_block_runs_the_model_s_own_fit_as_tk_fit(ddp):
    """`with tk.distribute(strategy="ddp", devices=2): model.fit(...); model.evaluate(...)`: bit-identical
    to tk.fit's classifier leg; the evaluation Keras' own of the whole set in one process."""
    import keras_run

    zero, one = rank(ddp, "distribute", 0), rank(ddp, "distribute", 1)
    expected = rank(ddp, "classifier", 0)
    assert zero["history"] == one["history"] == expected["history"]
    assert largest_difference(zero["variables"], expected["variables"]) == 0.0
    assert zero["evaluate"] == one["evaluate"]
    model, x, y, _ = keras_run.fit_arguments("classifier", keras_run.BATCH)
    for variable in model.variables:
        variable.assign(zero["variables"][variable.path])
    for name, value in model.evaluate(x, y, batch_size=2 * keras_run.BATCH, verbose=0, return_dict=True).items():
        assert zero["evaluate"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name


def test_verbose_prints_on_rank_0_only(ddp):
    """verbose=2: Keras' epoch lines on rank 0 (4 steps, the validation metrics); nothing on rank 1."""
    zero, one = rank(ddp, "weighted", 0), rank(ddp, "weighted", 1)
    assert "Epoch 1/2" in zero["stdout"] and "Epoch 2/2" in zero["stdout"]
    assert "4/4 - " in zero["stdout"] and "val_a_weighted_accuracy: " in zero["stdout"]
    assert one["stdout"] == ""


def test_guide_convnet_ranks_agree_and_only_rank_0_writes(ddp):
    """The guide's convnet (BatchNormalization, Dropout): every variable, moving statistics included,
    equal on both ranks (averaged at each epoch's end); History equal; ModelCheckpoint and CSVLogger,
    given a folder per rank, wrote in rank 0's only."""
    zero, one = rank(ddp, "guide", 0), rank(ddp, "guide", 1)
    assert zero["history"] == one["history"]
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    assert any("moving_mean" in name for name in zero["variables"])
    assert sorted(p.name for p in (ddp / "files.rank0").iterdir()) == ["best.keras", "log.csv"]
    assert list((ddp / "files.rank1").iterdir()) == []
    rows = (ddp / "files.rank0" / "log.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + len(zero["history"]["loss"])


def test_saved_model_predicts_the_same_in_plain_keras(ddp, spawned):
    """keras.saving.load_model of the file rank 0 saved, in a process without trainmesh (the spawn
    program, before it imports trainmesh): the trained model's predictions, bit-identical."""
    np.testing.assert_array_equal(np.load(spawned / "loaded_pred.npy"), np.load(ddp / "held_out_pred.npy"))


@pytest.mark.parametrize(("start", "leg"), [("spawn", "guide"), ("fork", "classifier")])
def test_ddp_spawn_trains_as_ddp(ddp, spawned, start, leg):
    """Under ddp_spawn and ddp_fork the model travels to the workers (Keras pickles it for spawn) and
    rank 0's trained variables and History come back to the caller's model: bit-identical to ddp."""
    got = torch.load(spawned / f"{start}_{leg}.pt", weights_only=False)
    expected = rank(ddp, leg, 0)
    assert largest_difference(got["variables"], expected["variables"]) == 0.0
    assert got["history"] == expected["history"]


def test_ddp_spawn_runs_a_program_s_own_layer_metric_and_model_classes(spawned):
    """ddp_spawn with a layer class defined in the launching script (``__main__.Affine``), and a model class
    (keras-io's CustomModel, its own train_step/test_step) and a metric class (SquaredError) from a module it
    imports: the workers rebuild the model with them and train it as one process at the global batch does
    (every variable and History within 1e-5). (Before: every worker failed: Could not locate class 'Affine'.)"""
    import keras_run

    got = torch.load(spawned / "spawn_own_classes.pt", weights_only=False)
    model, x, y, arguments = keras_run.own_classes_arguments(2 * keras_run.BATCH)
    history = model.fit(x, y, **{**arguments, "verbose": 0})
    assert largest_difference(got["variables"], keras_run.variables(model)) < 1e-5
    assert got["history"].keys() == history.history.keys()
    assert {"squared_error", "val_squared_error", "abs_error", "mae"} <= history.history.keys()
    for name, values in history.history.items():
        assert got["history"][name] == pytest.approx(values, rel=1e-5, abs=1e-7), name
