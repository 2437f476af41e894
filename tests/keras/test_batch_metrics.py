"""Compiled metrics whose update on a batch is not the sum of its samples' updates (keras-io's
``CategoricalTruePositives`` broadcasts (b,) against (b, 1): a count over pairs of samples), under 2
processes, against Keras' own fit at the global batch (keras_batch_metric_programs.py; the ddp runs are
one leg of the Keras programs' shared launch: conftest.py).

Before batch_metrics.py each process counted the pairs of its own half of every batch and the states were
summed: History 309 apart (arrays) and 425 (PyDatasets) where one process counts 616 and 843 pairs.
"""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)

TOLERANCE = 1e-5  # float rounding of the forward pass on halves of a batch (measured: <= 2.4e-7)


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    return keras_ddp_programs("keras_batch_metric_programs")


@pytest.mark.parametrize("name", ["pair_arrays", "pair_batches", "pair_own_step"])
def test_metrics_of_pairs_and_of_batches_are_one_process_s_at_the_global_batch(ddp, name):
    """A pair-counting metric class, a metric function giving one number per batch and Keras' accuracy:
    the last training batch uneven (8 + 7, 16 + 14), the last evaluation step rank 0's alone; arrays
    (interleaved) and PyDatasets (blocks). Ranks bit-identical; History (validation too), variables,
    optimizer state and evaluate within TOLERANCE of Keras' own run at the global batch. ``pair_own_step``:
    a train_step/test_step of the model's own returning ``self.compute_metrics(...)`` (Keras' method, routed
    for the model: routes.py), under zero1, predict too (test_routes.py: nothing written onto its objects)."""
    import keras_batch_metric_programs as programs
    from test_keras_unseen_programs import largest_difference

    zero, one = (torch.load(ddp / f"{name}.rank{r}", weights_only=False) for r in (0, 1))
    assert "error" not in zero, zero.get("error")
    assert largest_difference(zero, one) == 0.0
    expected = programs.run(name, 2 * programs.BATCH, distributed=False)
    assert expected["history"][0]["pair_matches"][-1] > 100, "the program must count many pairs"
    for key in expected:
        assert largest_difference(expected[key], zero[key]) < TOLERANCE, key


def test_shuffled_arrays_and_loaders_train_one_process_s_permutation(ddp):
    """fit's default shuffle=True on arrays (class_weight, a Dropout layer) and a DataLoader(shuffle=True) at
    2 processes of 16 read, each epoch, the permutation Keras' own fit at 32 draws (torch's RandomSampler
    from torch's generator), each process its samples of every global batch (batches.py's SampleShard).
    Before: arrays were shuffled within each process's share and a loader by DistributedSampler's seed,
    History 0.03 to 0.09 apart in keras-io's programs. Ranks bit-identical; all within TOLERANCE."""
    import keras_batch_metric_programs as programs
    from test_keras_unseen_programs import largest_difference

    zero, one = (torch.load(ddp / f"shuffled.rank{r}", weights_only=False) for r in (0, 1))
    assert "error" not in zero, zero.get("error")
    assert largest_difference(zero, one) == 0.0
    expected = programs.run("shuffled", 2 * programs.BATCH, distributed=False)
    for key in expected:
        assert largest_difference(expected[key], zero[key]) < TOLERANCE, key


def test_the_probe_finds_metrics_coupling_a_batch_s_samples():
    """The pair counter and the per-batch function are found; Keras' own metrics and the program's own
    classes adding per-sample values (a Mean subclass, an assign_add count) are not."""
    import keras_batch_metric_programs as programs
    import keras_custom_steps

    from trainmesh.keras.batch_metrics import coupled_metrics

    model = programs.compiled_model()
    x, y = programs.classes(32)
    assert coupled_metrics(model, x, y) == ["pair_matches", "prediction_spread"]
    own = (keras_custom_steps.SquaredError(), keras_custom_steps.OwnTruePositives(), "mae")
    model, x, y = keras_custom_steps.custom_step(metrics=own)
    assert coupled_metrics(model, x, y) == []


def test_a_coupled_metric_the_global_batch_cannot_reach_is_refused_before_start():
    """Refused before any process starts, naming the metric: a model overriding compute_metrics (it may
    read x, which is not gathered), and 3 processes whose last validation step 2 of them take."""
    import keras_batch_metric_programs as programs

    import keras
    from trainmesh.keras.arguments import check_fit

    model = programs.compiled_model()
    x, y = programs.classes(62)
    fit = {"batch_size": 4, "epochs": 1, "validation_data": (x[48:], y[48:])}  # 14: 5, 5, 4 a process
    with pytest.raises(ValueError, match=r"'pair_matches'.*\[2, 2, 1\] steps"):
        check_fit(model, x[:48], y[:48], dict(fit), world=3)
    assert check_fit(model, x[:48], y[:48], {**fit, "validation_data": (x[48:], y[48:])}, world=2)

    class OwnMetrics(keras.Sequential):
        def compute_metrics(self, x, y, y_pred, sample_weight=None):
            return super().compute_metrics(x, y, y_pred, sample_weight)

    own = OwnMetrics([keras.Input((6,)), keras.layers.Dense(programs.CLASSES, activation="softmax")])
    own.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=[programs.PairMatches()])
    with pytest.raises(ValueError, match=r"'pair_matches'.*OwnMetrics overrides"):
        check_fit(own, x, y, {"batch_size": 4}, world=2)
    assert not check_fit(own, x, y, {"batch_size": 4}, world=1)


def test_a_coupled_metric_a_step_updates_by_hand_is_refused_before_start(monkeypatch):
    """keras-io's pattern without compute_metrics: the pair counter updated by the model's own
    train_step/test_step (``self.pairs.update_state(y, y_pred)``). The call reaches the metric's own
    method with nothing of Keras' in between, so trainmesh cannot give it the global batch (it did, by
    rebinding the metric's update_state, which the project's rules forbid; before that each process
    counted its half's pairs: History 309 apart). Refused before any process starts under 2 processes,
    naming the metric and what to do instead; one process is Keras' own fit."""
    import keras_batch_metric_programs as programs

    import trainmesh.keras as tk
    from trainmesh.keras.arguments import check_evaluate, check_fit
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    model, fit, evaluate = programs.pair_by_hand(programs.BATCH)
    x, y = fit.pop("x"), fit.pop("y")
    expected = r"(?s)'pair_matches'.*ByHand's own train_step/test_step updates it by hand.*self\.compute_metrics"
    with pytest.raises(ValueError, match=expected):
        check_fit(model, x, y, dict(fit), world=2)
    with pytest.raises(ValueError, match=expected):
        check_evaluate(model, evaluate["x"], evaluate["y"], {"batch_size": 8}, world=2)
    with pytest.raises(ValueError, match=expected):
        tk.fit(model, x, y, strategy="ddp", devices=2, verbose=0, **fit)
    assert check_fit(model, x, y, dict(fit), world=1) == []


class KernelDistance:
    """keras-io's KID (generative/ddim.py): a per-batch estimate over pairs of the batch's samples, averaged
    over the batches, updated with real and generated samples in a test_step of the model's own."""

    @staticmethod
    def make():
        import keras
        from keras import ops

        class KID(keras.metrics.Metric):
            def __init__(self, name="kid", **kwargs):
                super().__init__(name=name, **kwargs)
                self.kid_tracker = keras.metrics.Mean(name="kid_tracker")

            def update_state(self, real, generated, sample_weight=None):
                batch = real.shape[0]
                kernel = (ops.matmul(real, ops.transpose(generated)) / real.shape[1] + 1.0) ** 3.0
                off_diagonal = ops.sum(kernel * (1.0 - ops.eye(batch))) / (batch * (batch - 1))
                self.kid_tracker.update_state(off_diagonal - ops.mean(kernel))

            def result(self):
                return self.kid_tracker.result()

            def reset_state(self):
                self.kid_tracker.reset_state()

        class Denoiser(keras.Model):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.network = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6)])
                self.kid = KID()
                self.built = True

            @property
            def metrics(self):
                return [self.kid]

            def test_step(self, images):
                self.kid.update_state(images, self.network(images))
                return {"kid": self.kid.result()}

        return Denoiser()


def test_a_metric_of_its_own_a_step_updates_by_hand_that_cannot_be_probed_is_refused_before_start():
    """keras-io's DDIM: its KID metric (its own class) updated in the model's test_step with real and generated
    images, the model fit on images alone (no targets) and without a call of its own: the probe cannot update
    it with targets and predictions, so nothing checked it. At 2 x 16 the validation KID was 6.0 from Keras'
    own fit at 32, silently (each process's half of a batch gives another estimate over pairs). Refused
    before any process starts, naming the metric and why; one process is Keras' own."""
    import numpy as np

    from trainmesh.keras.arguments import check_evaluate, check_fit

    model = KernelDistance.make()
    model.compile(optimizer="adam")
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    expected = r"(?s)'kid', of a class of your own, is updated by hand.*no targets.*run on one process"
    with pytest.raises(ValueError, match=expected):
        check_fit(model, x, None, {"batch_size": 4, "validation_data": (x,)}, world=2)
    with pytest.raises(ValueError, match=expected):
        check_evaluate(model, x, None, {"batch_size": 4}, world=2)
    assert check_fit(model, x, None, {"batch_size": 4}, world=1) == []
