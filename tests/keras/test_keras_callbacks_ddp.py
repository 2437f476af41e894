"""Keras callbacks, evaluate, predict and many nodes at 2 gloo processes, against one process.

keras_callbacks_run.py's ddp run (2 processes: the Keras programs' launch, conftest.py) runs every leg one
after another: EarlyStopping
with ReduceLROnPlateau (also on the metrics a train_step of the user's returns), LearningRateScheduler, TerminateOnNaN, a BackupAndRestore run interrupted at
an epoch and run again, trainmesh.keras.evaluate and predict. Each leg is compared between the ranks
and with Keras' own model.fit/evaluate/predict in this process at the global batch (2 x 16). A second
test trains on 2 torchrun nodes of one process each.
"""

import contextlib
import functools
import importlib.util
import io
import math
import os
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parent
SCRIPT = HERE / "keras_callbacks_run.py"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from helpers.forked import can_fork, run_forked  # noqa: E402
from strategies.legs import run_torchrun_nodes  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    """keras_callbacks_run.py's ddp run (a leg of the Keras programs' one launch: conftest.py)."""
    return keras_ddp_programs("keras_callbacks_run")


def ranks(root: Path, leg: str) -> tuple[dict, dict]:
    return tuple(torch.load(root / f"{leg}.rank{r}", weights_only=False) for r in (0, 1))  # type: ignore[return-value]


def one_process(leg: str):
    """Keras' own model.fit in this process at the global batch, with the leg's callbacks."""
    model, history, _ = one_process_printing(leg)
    return model, history


@functools.cache
def one_process_printing(leg: str):
    """``one_process`` and what its callbacks printed: run once per leg and kept, the plateau and
    scheduler legs' fits serving two tests each (the weights and History are only read)."""
    import keras_callbacks_run as run

    model, x, y, arguments = run.fit_arguments(leg, 2 * run.BATCH)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        history = model.fit(x, y, verbose=0, **arguments)
    return model, history, printed.getvalue()


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def test_early_stopping_and_reduce_lr_on_plateau_decide_alike_on_every_rank(ddp):
    """EarlyStopping (val_accuracy, restore_best_weights) stops both ranks at the epoch one process
    stops at, ReduceLROnPlateau halves the learning rate at the same epochs: History (learning_rate
    included) equal on both ranks, its accuracies and learning rates equal to one process's, the
    restored weights within 1e-5 of one process's."""
    import keras_run

    zero, one = ranks(ddp, "plateau")
    assert zero["history"] == one["history"]
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    model, history = one_process("plateau")
    expected = history.history
    assert 1 < len(expected["loss"]) < 20, "the leg must stop early"
    assert len(set(expected["learning_rate"])) > 1, "the leg must reduce the learning rate"
    for name in ("val_accuracy", "accuracy", "learning_rate"):
        assert zero["history"][name] == expected[name], name
    assert zero["history"]["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-5)
    assert zero["learning_rate"] == float(model.optimizer.learning_rate.numpy())
    assert largest_difference(zero["variables"], keras_run.variables(model)) < 1e-5


@pytest.mark.parametrize("leg", ["plateau", "scheduler"])
def test_callbacks_print_their_verbose_lines_once_on_rank_0(ddp, leg):
    """EarlyStopping, ReduceLROnPlateau and LearningRateScheduler at verbose=1 run on every rank (they
    decide alike) and print on rank 0 only: rank 0's stdout is Keras' own one-process transcript (each
    "Epoch k: ReduceLROnPlateau reducing learning rate to ...", "Epoch k: early stopping", "Restoring model
    weights ..." once), rank 1's empty. (Before: every line printed by both ranks.)"""
    zero, one = ranks(ddp, leg)
    _, _, printed = one_process_printing(leg)
    assert printed.count("Epoch ") >= 3, "the leg's callbacks must print"
    assert zero["stdout"] == printed
    assert one["stdout"] == ""


def test_a_custom_train_step_s_returned_values_are_over_all_processes(ddp):
    """keras-io's custom train_step and test_step returning {m.name: m.result() for m in self.metrics}
    (the compiled loss and mae, a Mean("abs_error") tracker of its own) and the step's plain loss
    tensor (batch_loss), with ReduceLROnPlateau on abs_error and EarlyStopping on loss: History, every
    training and validation entry with learning_rate, equal on both ranks and within 1e-5 of one
    process at the global batch (batch_loss: the last batch's 3 + 2 samples weighted as one batch of
    5); the learning rate halved at the same epochs and the stop at the same epoch as one process's;
    the weights within 1e-5. (Before: each rank's History was its own.)"""
    import keras_run

    zero, one = ranks(ddp, "custom_step")
    assert zero["history"] == one["history"]
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    model, history = one_process("custom_step")
    expected = history.history
    assert 1 < len(expected["loss"]) < 12, "the leg must stop early"
    assert len(set(expected["learning_rate"])) > 2, "the leg must reduce the learning rate, twice at least"
    assert zero["history"].keys() == expected.keys()
    assert {"abs_error", "batch_loss", "mae", "val_batch_loss", "val_abs_error"} <= expected.keys()
    assert zero["history"]["learning_rate"] == expected["learning_rate"]
    for name, values in expected.items():
        assert zero["history"][name] == pytest.approx(values, rel=1e-5, abs=1e-7), name
    assert zero["iterations"] == int(model.optimizer.iterations.numpy())
    assert largest_difference(zero["variables"], keras_run.variables(model)) < 1e-5


def test_compute_loss_and_compute_metrics_of_the_model_s_own_over_two_processes(ddp):
    """A model overriding compute_loss (the compiled loss plus an L2 penalty on its kernels) and
    compute_metrics (plus the batch's mean prediction, a plain tensor: Keras' epoch logs are then the last
    step's dict) at 2 processes: History (training and validation) equal on both ranks and within 1e-5 of
    one process at the global batch, every weight within 1e-5; tk.evaluate over all the data (the same
    overrides through test_step) equal on both ranks and to Keras' evaluate of rank 0's weights."""
    import keras_callbacks_run as run

    zero, one = ranks(ddp, "overrides")
    assert zero["history"] == one["history"]
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    model, history = one_process("overrides")
    assert zero["history"].keys() == history.history.keys() >= {"prediction_mean", "val_prediction_mean"}
    for name, values in history.history.items():
        assert zero["history"][name] == pytest.approx(values, rel=1e-5, abs=1e-7), name
    assert largest_difference(zero["variables"], run.keras_run.variables(model)) < 1e-5
    assert zero["evaluate"] == one["evaluate"]
    for variable in model.variables:
        variable.assign(zero["variables"][variable.path])
    x, y = run.keras_run.get_tabular()
    for name, value in model.evaluate(x, y, batch_size=2 * run.BATCH, verbose=0, return_dict=True).items():
        assert zero["evaluate"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name


class Gathering:
    """A stand-in runtime of step_logs.over_processes: the other processes' contributions are given."""

    def __init__(self, others: list) -> None:
        self.others, self.sent = others, None

    def all_gather_object(self, obj):
        self.sent = obj
        return [obj, *self.others]


def test_a_step_s_plain_values_are_weighted_by_batch_size():
    """What 2 processes' steps returned, at last batches of 3 and 2 samples: a plain tensor becomes
    (3 v0 + 2 v1) / 5 (one process's loss over the 5 samples), nested ones too; an entry equal to the
    result of the metric of its name on both processes becomes that metric's summed result; one that
    is not its metric's result on one process (a stale value) is weighted as a plain value."""
    import keras_custom_steps  # noqa: F401  (KERAS_BACKEND=torch before keras)

    import keras
    from trainmesh.keras import step_logs

    tracker = keras.metrics.Mean(name="loss")
    tracker.update_state(2.0)
    before, after = {"loss": tracker.result(), "acc": tracker.result()}, {"loss": 7.0, "acc": 7.0}
    logs = [
        {"batch_loss": torch.tensor(1.0), "loss": tracker.result(), "acc": tracker.result(), "m": {"a": 1.0}},
        {"batch_loss": torch.tensor(4.0), "loss": tracker.result(), "acc": torch.tensor(9.0), "m": {"a": 6.0}},
    ]
    rank1 = Gathering([])
    step_logs.over_processes(rank1, logs[1], before, after, 2)
    got = step_logs.over_processes(Gathering([rank1.sent]), logs[0], before, after, 3)
    assert float(got["batch_loss"]) == pytest.approx((3 * 1.0 + 2 * 4.0) / 5, rel=1e-7)
    assert got["loss"] == 7.0
    assert float(got["acc"]) == pytest.approx((3 * 2.0 + 2 * 9.0) / 5, rel=1e-7)
    assert float(got["m"]["a"]) == pytest.approx((3 * 1.0 + 2 * 6.0) / 5)


def test_learning_rate_scheduler_sets_the_same_rate_on_every_rank(ddp):
    import keras_run

    zero, one = ranks(ddp, "scheduler")
    model, history = one_process("scheduler")
    assert zero["history"]["learning_rate"] == one["history"]["learning_rate"] == history.history["learning_rate"]
    assert history.history["learning_rate"] == pytest.approx([0.05, 0.025, 0.0125])
    assert largest_difference(zero["variables"], one["variables"]) == 0.0
    assert largest_difference(zero["variables"], keras_run.variables(model)) < 1e-5


def test_terminate_on_nan_seen_by_one_rank_stops_every_rank(ddp):
    """Only rank 1's batch NAN_BATCH holds a NaN sample: both ranks stop after that batch, as one process
    at the global batch does. The batch losses the leg's LambdaCallback reads are those of the global
    batches, as one process's: NaN at NAN_BATCH on both ranks (before kerasc: each rank read its own, rank
    0 a finite loss there)."""
    import keras_callbacks_run as run

    import keras

    zero, one = ranks(ddp, "nan")
    model, x, y, arguments = run.fit_arguments("nan", 2 * run.BATCH)
    losses: list = []
    arguments["callbacks"].append(
        keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(logs["loss"]))
    )
    model.fit(x, y, verbose=0, **arguments)
    assert int(model.optimizer.iterations.numpy()) == run.NAN_BATCH + 1
    assert zero["iterations"] == one["iterations"] == run.NAN_BATCH + 1
    assert len(zero["batch_losses"]) == len(one["batch_losses"]) == len(losses) == run.NAN_BATCH + 1
    assert all(math.isnan(seen[-1]) for seen in (zero["batch_losses"], one["batch_losses"], losses))
    assert zero["batch_losses"][:-1] == one["batch_losses"][:-1] == pytest.approx(losses[:-1], rel=1e-5)


def test_backup_and_restore_resumes_an_interrupted_run(ddp):
    """A fit raising at INTERRUPT_EPOCH on every rank, then run again: it resumes from rank 0's backup
    and ends bit-identical to the uninterrupted run, its History the uninterrupted one's last epochs.
    Each rank was given its own folder: the backup was written in rank 0's only (so rank 1 resumed
    from rank 0's broadcast variables and epoch), and deleted at the end."""
    import keras_callbacks_run as run

    zero, one = ranks(ddp, "backup")
    whole, _ = ranks(ddp, "uninterrupted")
    assert zero["backup_files"] == ["latest.weights.h5", "training_metadata.json"]
    assert one["backup_files"] == []
    assert zero["after"] == one["after"] == []
    expected = {name: values[run.INTERRUPT_EPOCH :] for name, values in whole["history"].items()}
    assert zero["history"] == one["history"] == expected
    assert largest_difference(zero["variables"], whole["variables"]) == 0.0
    assert largest_difference(one["variables"], whole["variables"]) == 0.0
    assert zero["iterations"] == whole["iterations"]


def test_evaluate_and_predict_at_two_processes_equal_one_process(ddp):
    """tk.evaluate at 2 processes: Keras' evaluate of the whole set (accuracy, precision, recall exact);
    tk.predict: every prediction, in the order of x, on both ranks."""
    import keras_callbacks_run as run

    zero, one = ranks(ddp, "inference")
    assert zero["evaluate"] == one["evaluate"]
    np.testing.assert_array_equal(zero["predict"], one["predict"])
    model, x, y, _ = run.fit_arguments("scheduler", 2 * run.BATCH)
    assert largest_difference(zero["variables"], run.keras_run.variables(model)) == 0.0
    expected = model.evaluate(x, y, batch_size=2 * run.BATCH, verbose=0, return_dict=True)
    for name in ("accuracy", "precision", "recall"):
        assert zero["evaluate"][name] == expected[name], name
    assert zero["evaluate"]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    np.testing.assert_allclose(zero["predict"], model.predict(x, batch_size=2 * run.BATCH, verbose=0), rtol=1e-6)
    assert zero["predict"].shape == (len(x), 1)


def test_two_torchrun_nodes_train_as_two_processes_on_one_node(ddp, tmp_path):
    """tk.fit(strategy="ddp", devices=1, num_nodes=2) in the processes of 2 torchrun nodes (one process
    each, with the variables torchrun gives them: their node's GROUP_RANK, LOCAL_RANK 0, LOCAL_WORLD_SIZE 1):
    bit-identical to the single-node 2-process run of the same leg, History included. The processes are
    forks (helpers/forked.py's torchrun ranks, nodes=2), not 2 agents' new interpreters (about 6 CPU-s
    each, importing torch, dynamo and Keras): what is checked is what Keras' fit trains across nodes;
    torchrun's own rendezvous of two agents has its real launches in tests/strategies (conftest.py's
    two-node legs, test_seed_003.py)."""
    if can_fork():
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = run_forked(
            SCRIPT, ["node", str(tmp_path)], env=environment, timeout=200, cwd=HERE, world=2, torchrun=True, nodes=2
        )
        assert done.returncode == 0, done.stderr[-3000:]
    else:  # 2 torchrun agents, their workers new interpreters
        run_torchrun_nodes(["node"], [tmp_path, tmp_path], timeout=200, script=SCRIPT)
    single, _ = ranks(ddp, "uninterrupted")
    for r in range(2):
        got = torch.load(tmp_path / f"node.rank{r}", weights_only=False)
        assert got["history"] == single["history"]
        assert largest_difference(got["variables"], single["variables"]) == 0.0


def h5_datasets(source) -> dict:
    """Every dataset of a Keras .weights.h5 file (a path, or the bytes of one inside a .keras file), by path."""
    import h5py

    found: dict = {}
    with h5py.File(io.BytesIO(source) if isinstance(source, bytes) else source, "r") as file:
        file.visititems(lambda name, item: found.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return found


def saved_state(path: Path) -> tuple[dict, str]:
    """What a saved file holds: its weights and optimizer datasets, and (a .keras file) its config."""
    if path.suffix != ".keras":
        return h5_datasets(path), ""
    with zipfile.ZipFile(path) as archive:
        config = archive.read("config.json").decode()  # its shared_object_id values are Python id()s
        return h5_datasets(archive.read("model.weights.h5")), re.sub(r'"shared_object_id": \d+', "", config)


def test_zero1_checkpoints_and_backups_are_the_files_one_process_writes(ddp, tmp_path):
    """strategy="zero1" with BackupAndRestore, ModelCheckpoint each epoch (.keras) and every 3 batches
    (.weights.h5), interrupted at INTERRUPT_EPOCH and run again: each file rank 0 wrote (the backup at the
    interruption, the four .keras files, the last batch checkpoint) holds what the file Keras' own fit writes
    in one process at the global batch holds: the same datasets (the whole optimizer state: its slots for
    every variable) within 1e-5, the same config; Keras loads the last .keras with that optimizer state.
    The resumed run restores from the zero1 backup and ends bit-identical to the uninterrupted ddp run, its
    History that run's last epochs; rank 1 wrote nothing. (Before: zero1 refused these callbacks.)"""
    import keras_callbacks_run as run

    import keras

    zero, one = ranks(ddp, "zero1_backup")
    assert "error" not in zero, zero.get("error")
    whole, _ = ranks(ddp, "uninterrupted")
    expected = {name: values[run.INTERRUPT_EPOCH :] for name, values in whole["history"].items()}
    assert zero["history"] == one["history"] == expected
    assert largest_difference(zero["variables"], whole["variables"]) == 0.0
    assert largest_difference(one["variables"], whole["variables"]) == 0.0
    assert zero["backup_files"] == ["latest.weights.h5", "training_metadata.json"] and one["backup_files"] == []
    written = ["batches.weights.h5", *(f"epoch{e}.keras" for e in range(1, 5)), "interrupted.weights.h5"]
    assert zero["after"] == written and one["after"] == []
    reference = run.interrupted_then_resumed(str(tmp_path), strategy=None, batch=2 * run.BATCH)
    assert reference["after"] == written
    for name in written:
        got, config = saved_state(ddp / "zero1.rank0" / name)
        want, want_config = saved_state(tmp_path / name)
        assert got.keys() == want.keys() and any(key.startswith("optimizer/") for key in got), name
        assert largest_difference(got, want) < 1e-5, name
        assert config == want_config, name
    loaded = keras.saving.load_model(ddp / "zero1.rank0" / "epoch4.keras")
    for got, want in zip(
        loaded.optimizer.variables, keras.saving.load_model(tmp_path / "epoch4.keras").optimizer.variables
    ):
        np.testing.assert_allclose(np.array(got.numpy()), np.array(want.numpy()), rtol=0, atol=1e-5)
