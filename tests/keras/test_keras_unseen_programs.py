"""Keras programs written as users write them (keras_unseen_programs.py), each under Keras' own
fit/evaluate/predict in this process at the global batch (2 x 16) and under trainmesh.keras' ddp at 2
processes (one leg of the Keras programs' shared launch: conftest.py). Every rank must hold the same
results, and those must be one process's: History (both fits where the program continues with
``initial_epoch``), every variable, the optimizers' states, what a callback of the program's own read
from its batch and epoch logs, evaluate and predict. A program Keras' semantics cannot be kept for
across processes must be refused before training, on every rank, saying why.
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)

TOLERANCE = 1e-5  # float rounding of sums over 2 processes' halves instead of one batch (measured: <= 8e-7)
SAME = ["subclassed_step", "uneven_tracker", "two_optimizers", "class_weights", "callbacks",
        "pydataset_steps", "pydataset_tracker", "loader_tracker",
        "initial_epoch", "clipped_by_hand", "batch_shuffled", "steps_shuffled", "extra_entry"]  # fmt: skip


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    return keras_ddp_programs("keras_unseen_programs")


def ranks(root: Path, name: str) -> tuple[dict, dict]:
    return tuple(torch.load(root / f"{name}.rank{r}", weights_only=False) for r in (0, 1))  # type: ignore[return-value]


def largest_difference(a, b) -> float:
    """The largest absolute difference between two nested results of the same structure."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max([largest_difference(a[k], b[k]) for k in a], default=0.0)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        return max([largest_difference(x, y) for x, y in zip(a, b, strict=True)], default=0.0)
    if isinstance(a, str):
        assert a == b
        return 0.0
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    return float(np.abs(a - b).max()) if a.size else 0.0


@pytest.mark.parametrize("name", SAME)
def test_each_program_trains_at_2_processes_what_keras_trains_at_the_global_batch(ddp, name):
    """Ranks bit-identical; every recorded number within TOLERANCE of Keras' own run at the global batch.
    Fixed in kerasc: ``uneven_tracker`` (a Mean tracker updated once per step, the last global batch 8 +
    7: History 1.5e-3 apart before), ``callbacks`` (a callback's batch logs were rank 0's own: 0.22
    apart). Fixed in kerasu: ``pydataset_tracker`` (the same tracker on PyDatasets, whose batch sizes
    are known only once read: History 0.013 apart before),
    ``loader_tracker`` (on DataLoaders, the validation's last step rank 0's only: 0.042 before).
    ``clipped_by_hand``: a train_step clipping the gradients by their global norm by hand and tracking
    that norm (each process clipped and logged its own gradient: 0.39 apart before; backward.py).
    Fixed in k-progs: ``batch_shuffled`` (``shuffle="batch"`` permuted each process's share of a batch on its
    own, so Dropout's rows met other samples: History 3.8e-2 apart before in a keras-io text classifier)
    and ``steps_shuffled`` (``steps_per_epoch`` with ``shuffle=True``: each process shuffled its own share,
    6.2e-2 apart before); batches.py."""
    import keras_unseen_programs as programs

    zero, one = ranks(ddp, name)
    assert "error" not in zero, zero.get("error")
    for key in ("history", "variables", "optimizer", "logs", "predict"):
        assert largest_difference(zero[key], one[key]) == 0.0, key
    expected = programs.run(name, 2 * programs.BATCH, distributed=False)
    assert expected.keys() == zero.keys()
    for key in expected:
        assert largest_difference(expected[key], zero[key]) < TOLERANCE, key


def test_a_callback_reads_each_batch_s_logs_over_all_processes(ddp):
    """The ``callbacks`` program's LogReader: its on_train_batch_end / on_test_batch_end logs are those of
    the global batches (one process's running accuracy and loss), on both ranks; EarlyStopping stopped
    and ReduceLROnPlateau halved the rate at one process's epochs."""
    import keras_unseen_programs as programs

    zero, one = ranks(ddp, "callbacks")
    expected = programs.run("callbacks", 2 * programs.BATCH, distributed=False)
    batches = [entry for entry in zero["logs"] if entry[0] in ("batch", "test_batch")]
    assert len(batches) > 10 and zero["logs"] == one["logs"]
    assert len(expected["history"][0]["loss"]) < 12, "the program must stop early"
    assert len(set(expected["history"][0]["learning_rate"])) > 1, "the program must reduce the learning rate"
    assert zero["history"][0]["learning_rate"] == expected["history"][0]["learning_rate"]
    assert largest_difference(expected["logs"], zero["logs"]) < TOLERANCE


def test_processes_with_callbacks_of_their_own_agree_on_reading_batch_logs(ddp):
    """As under torchrun, each rank passes its own callbacks to tk.fit: rank 0 one reading training
    batches, rank 1 one reading evaluation batches. Both finish (before kerasr: each summed logs at
    steps the other did not), and each read the global batches' logs: those of the ``callbacks``
    program's first epoch, where every rank reads both."""
    zero, one = ranks(ddp, "rank_callbacks")
    assert "error" not in zero and "error" not in one, (zero.get("error"), one.get("error"))
    assert zero["history"] == one["history"]
    everyone = ranks(ddp, "callbacks")[0]["logs"]
    first = [entry for entry in everyone if entry[0] == "epoch"][0]
    until = everyone.index(first)

    def read(logs: list, kind: str) -> list:
        return [entry for entry in logs if entry[0] == kind]

    assert read(zero["logs"], "batch") == read(everyone[:until], "batch") and len(read(zero["logs"], "batch")) == 4
    assert read(one["logs"], "test_batch") == read(everyone[:until], "test_batch") and read(one["logs"], "test_batch")
    assert {k: v[0] for k, v in zero["history"].items()} == {k: first[2][k] for k in zero["history"]}


def test_a_metric_whose_state_is_not_a_sum_is_refused_before_training(ddp):
    """``own_metric``: a running maximum summed over 2 processes would read 7.06 where one process reads
    3.72 (measured before kerasc); refused by tk.fit on every rank, naming the metric and what to do."""
    zero, one = ranks(ddp, "own_metric")
    assert "error" in zero and zero["error"] == one["error"]
    for part in ("'worst_error' (WorstError)", "does not add up", "assign_add", "model.evaluate in one process"):
        assert part in zero["error"], zero["error"]


def test_a_callback_reading_evaluation_batches_the_processes_take_unevenly_is_refused(ddp):
    """tk.evaluate of 17 samples at batch_size=8 per process (2 steps on rank 0, 1 on rank 1) with a
    callback reading on_test_batch_end: refused before evaluating (rank 0's second batch could only
    hand it rank 0's own values), on both ranks, with the step counts and what to do."""
    zero, one = ranks(ddp, "uneven_test_logs")
    assert "error" in zero and zero == one
    assert "[2, 1] evaluation steps" in zero["error"] and "on_test_end" in zero["error"]


def test_the_metric_probe_passes_states_that_add_up():
    """Metric classes of a program's own whose state is a sum (a Mean subclass, an assign_add count) and
    Keras' own metrics pass the probe at 2 processes; the running maximum does not."""
    import keras_custom_steps
    import keras_unseen_programs as programs

    from trainmesh.keras.metric_states import refuse_non_additive_metrics

    own = (keras_custom_steps.SquaredError(), keras_custom_steps.OwnTruePositives(), "mae")
    model, x, y = keras_custom_steps.custom_step(metrics=own)
    refuse_non_additive_metrics(model, x, y, world=2)
    program = programs.own_metric(programs.BATCH)
    refuse_non_additive_metrics(program.model, program.fit["x"], program.fit["y"], world=1)  # one process: Keras'
    with pytest.raises(ValueError, match="worst_error"):
        refuse_non_additive_metrics(program.model, program.fit["x"], program.fit["y"], world=2)


def test_the_metric_probe_refuses_a_moving_average_whatever_the_first_batch_scores():
    """A metric keeping an exponential moving average of binary accuracy (ema = 0.9 ema + 0.1 acc) does
    not add up; before kerasr the probe passed it where its first probe batch scored 0 (targets
    [1, 1]: accuracies 0 then 1, 0.9 * 0 + 0.1 = 0 + 0.1) and refused it with targets [0, 0]."""
    import keras
    from trainmesh.keras.metric_states import refuse_non_additive_metrics

    class MovingAccuracy(keras.metrics.Metric):
        def __init__(self, name="moving_accuracy", **kwargs):
            super().__init__(name=name, **kwargs)
            self.ema = self.add_variable(shape=(), initializer="zeros", name="ema")

        def update_state(self, y_true, y_pred, sample_weight=None):
            accuracy = keras.ops.mean(keras.metrics.binary_accuracy(y_true, y_pred))
            self.ema.assign(0.9 * self.ema + 0.1 * accuracy)

        def result(self):
            return self.ema

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=[MovingAccuracy()])
    x = np.zeros((4, 2), dtype="float32")
    for targets in ([1, 1, 0, 0], [0, 0, 1, 1]):
        y = np.array(targets, dtype="float32").reshape(-1, 1)
        with pytest.raises(ValueError, match="moving_accuracy"):
            refuse_non_additive_metrics(model, x, y, world=2)


def test_tensorboard_writing_batches_reads_the_batch_logs():
    """Keras' TensorBoard with update_freq "batch" or N writes batch_<name> for every entry of the
    training batch logs (on_train_batch_end): counted as a reader, so that they are over all processes
    (before kerasr: rank 0's own). update_freq="epoch" (the default) reads none; no evaluation batches."""
    import keras
    from trainmesh.keras.step_means import TEST_HOOKS, TRAIN_HOOKS, reads_batch_logs

    for freq in ("batch", 5):
        board = keras.callbacks.TensorBoard("tb", update_freq=freq)
        assert reads_batch_logs([board], TRAIN_HOOKS) and not reads_batch_logs([board], TEST_HOOKS)
    assert not reads_batch_logs([keras.callbacks.TensorBoard("tb")], TRAIN_HOOKS)


def test_a_tracker_a_train_step_updates_by_hand_is_probed_with_values():
    """A train_step of the model's own updating a metric class of its own with one value (a running
    maximum of the loss, ``self.peak.update_state(loss)``): under 2 processes the maxima were summed
    (max_step program, 2 processes of 16 against Keras' own fit at 32: History 2.31 apart, silently);
    refused before start, naming it and what to do. A tracker whose state adds up (a Mean subclass)
    passes, and one process is Keras' own fit."""
    import keras_custom_steps  # noqa: F401 -- sets KERAS_BACKEND before keras is imported

    import keras
    from trainmesh.keras.arguments import check_fit

    class Peak(keras.metrics.Metric):
        def __init__(self, name="peak", **kwargs):
            super().__init__(name=name, **kwargs)
            self.top = self.add_variable(shape=(), initializer="zeros", name="top")

        def update_state(self, value):
            self.top.assign(keras.ops.maximum(self.top, value))

        def result(self):
            return self.top

    class Tracked(keras.metrics.Mean):
        pass

    class Stepping(keras.Model):
        def __init__(self, tracker, **kwargs):
            super().__init__(**kwargs)
            self.dense, self.tracker = keras.layers.Dense(1), tracker

        def call(self, x):
            return self.dense(x)

    x, y = np.zeros((8, 2), dtype="float32"), np.zeros((8, 1), dtype="float32")
    for tracker, refused in ((Peak(), True), (Tracked(name="tracked"), False)):
        model = Stepping(tracker)
        model.compile(optimizer="sgd", loss="mse")
        check_fit(model, x, y, {"batch_size": 2}, world=1)
        if refused:
            with pytest.raises(ValueError, match=r"(?s)'peak' \(Peak\).*does not add up.*assign_add"):
                check_fit(model, x, y, {"batch_size": 2}, world=2)
        else:
            check_fit(model, x, y, {"batch_size": 2}, world=2)


@pytest.mark.parametrize("targets", ["list", "dict", "loader"])
def test_the_metric_probe_reads_each_output_s_targets_and_a_loader_s(targets):
    """A running maximum on one output of a model with two (keras-io's functional_api 2-output model,
    compiled with a metric list/dict per output), or on a model a DataLoader feeds: before k-progs5 not
    probed (only one array of targets was read), and at 2 processes its History read 3.1 (list) and 1.0
    (dict) apart from Keras' own fit, silently. Refused before start now; Keras' own metrics pass."""
    os.environ.setdefault("KERAS_BACKEND", "torch")  # this test may be a worker's first to import keras
    import torch

    import keras
    from trainmesh.keras.metric_states import refuse_non_additive_metrics

    class RunningMax(keras.metrics.Metric):
        def __init__(self, name="running_max", **kwargs):
            super().__init__(name=name, **kwargs)
            self.peak = self.add_variable(shape=(), initializer="zeros", name="peak")

        def update_state(self, y_true, y_pred, sample_weight=None):
            error = keras.ops.max(keras.ops.abs(keras.ops.cast(y_true, "float32") - y_pred))
            self.peak.assign(keras.ops.maximum(self.peak, error))

        def result(self):
            return self.peak

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    outputs = {
        "flag": keras.layers.Dense(1, name="flag")(inputs),
        "amount": keras.layers.Dense(1, name="amount")(inputs),
    }
    x = np.arange(48, dtype="float32").reshape(16, 3)  # the probe reads a loader's first 16 samples
    y = {"flag": (x[:, :1] > 20).astype("float32"), "amount": x[:, 1:2] / 10}
    if targets == "list":
        model, y = keras.Model(inputs, [outputs["flag"], outputs["amount"]]), [y["flag"], y["amount"]]
        metrics = lambda own: [["accuracy"], own]  # noqa: E731
    elif targets == "dict":
        model = keras.Model(inputs, outputs)
        metrics = lambda own: {"flag": ["accuracy"], "amount": own}  # noqa: E731
    else:
        model = keras.Model(inputs, outputs["amount"])
        data = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y["amount"]))
        x, y = torch.utils.data.DataLoader(data, batch_size=4), None
        metrics = lambda own: own  # noqa: E731
    model.compile(optimizer="sgd", loss="mse", metrics=metrics(["mae"]))
    refuse_non_additive_metrics(model, x, y, world=2)
    model.compile(optimizer="sgd", loss="mse", metrics=metrics([RunningMax()]))
    with pytest.raises(ValueError, match=r"'running_max' \(RunningMax\) keeps a state that does not add up"):
        refuse_non_additive_metrics(model, x, y, world=2)


def test_evaluate_with_no_fit_before_probes_a_test_step_of_its_own(ddp):
    """tk.evaluate alone (no fit before it: the step probe ran when fit began) of a test_step feeding its
    tracker the masked accuracy of the batch (a ratio of its sums): before, not probed, and 2 x 16 read 0.31907
    where Keras' evaluate at 32 reads 0.31852, silently; now refused on both ranks naming the metric. Fed per
    position with sample_weight=mask, it passes, as Keras' own evaluate at 32."""
    import keras_unseen_programs as programs

    zero, one = ranks(ddp, "evaluate_only_ratio")
    assert "error" in zero and zero == one, zero
    for part in ("'acc'", "test_step", "evaluated data", "sample_weight=mask"):
        assert part in zero["error"], zero["error"]
    zero, one = ranks(ddp, "evaluate_only_weighted")
    model, x, y = programs.masked_tagger("weighted")
    keras_own = model.evaluate(x, y, batch_size=2 * programs.BATCH, verbose=0, return_dict=True)
    assert zero == one and abs(zero["acc"] - keras_own["acc"]) < 1e-6, (zero, keras_own)
