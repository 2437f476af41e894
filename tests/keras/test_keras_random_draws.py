"""Random draws in a step and added losses under 2 processes, against Keras' own fit at the global batch
(keras_random_programs.py; the ddp runs are one leg of the Keras programs' shared launch: conftest.py).

Before draws.py, every process drew the same numbers for its half of each global batch (the first rows of
what one process draws): a Dropout classifier, a train_step drawing noise as keras-io's GAN guide does and a
VAE-style sampling layer trained and evaluated apart from one process, silently, while the ranks agreed.
"""

import importlib.util
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

TOLERANCE = 1e-5  # float rounding of sums over 2 processes' halves instead of one batch
# mixup_step: keras-io's MixUp drawing two keras.random.gamma of shape (batch, 1) in its step, refused at the draw
# before draws.MAPPED_WITH_NUMBERS
# torch_drawing_step: torch.randn/randn_like/rand/F.dropout in its step (torch_draws.py; before: 1e-2 apart, silently)
SAME = ["dropout", "dropout_loader", "dropout_pydataset", "drawing_step", "sampling", "batch_mean_loss", "mixup_step"]
SAME += ["torch_drawing_step", "spatial_dropout"]
# tensor_method_step: x.normal_(), bernoulli_, uniform_ in its step (tensor_draws.py; before: apart, silently)
SAME += ["tensor_method_step"]
# own_generator_step: torch.randn(..., generator=g) of its own (torch_draws.py; before: apart, silently)
SAME += ["own_generator_step"]
# accumulating_step: gradients accumulated over 4 micro-batches, one apply (probe_accumulation.py; before: refused as
# "not a mean")
SAME += ["accumulating_step"]


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    return keras_ddp_programs("keras_random_programs")


def ranks(root: Path, name: str) -> tuple[dict, dict]:
    return tuple(torch.load(root / f"{name}.rank{r}", weights_only=False) for r in (0, 1))  # type: ignore[return-value]


def largest_difference(a, b) -> float:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max([largest_difference(a[k], b[k]) for k in a], default=0.0)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        return max([largest_difference(x, y) for x, y in zip(a, b, strict=True)], default=0.0)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    return float(np.abs(a - b).max()) if a.size else 0.0


@pytest.mark.parametrize("name", SAME)
def test_each_process_draws_its_rows_of_one_process_s_draw(ddp, name):
    """History, every variable (SeedGenerator states included), the optimizer's state, evaluate and predict
    within TOLERANCE of Keras' own run at the global batch, the ranks bit-identical, and torch's generator
    where one process leaves it (an unseeded Dropout draws from it)."""
    import keras_random_programs as programs

    zero, one = ranks(ddp, name)
    assert "error" not in zero, zero.get("error")
    assert largest_difference(zero, one) == 0.0
    expected = programs.run(name, 2 * programs.BATCH, distributed=False)
    assert expected.keys() == zero.keys()
    for key in expected:
        assert largest_difference(expected[key], zero[key]) < TOLERANCE, key


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("batch_sum_loss", ("add_loss", "a sum over the samples", "ops.mean")),
        ("categorical_step", ("keras.random.categorical", "batch-shaped", "pass it with the data")),
        ("mixup_tensor_alpha", ("keras.random.gamma", "batch-shaped", "pass it with the data")),
        ("torch_poisson_step", ("torch.poisson", "batch-shaped", "pass it with the data")),
        ("sampling_predict_pydataset", ("keras.random.normal", "predicting a PyDataset or a DataLoader")),
        # a randn imported by name before fit (unmapped_draws.py; before: trained apart, silently)
        ("imported_draw_step", ("torch's global random generator", "from torch import randn", "run on one process")),
        # an EMA of the batch's mean and a count of samples kept by hand (hand_updates.py; before: the ranks'
        # centres 0.21 apart, the count half Keras', silently)
        ("ema_step", ("updates the variable 'hand_updated_step/centre' by hand", "keras.metrics.Mean")),
        # the same at every other step, from the second on (before: ranks 0.13 apart, silently): stopped after the
        # second step (before: at the first epoch's end)
        (
            "ema_later_step",
            ("'hand_updated_step/centre' of the model is", "apart between the processes after training step 2"),
        ),
        # a count of samples alone from the second step (the copies agree; before: half Keras' count, silently):
        # the probe runs the step again at the first epoch's end
        ("count_later_step", ("updates the variable 'hand_updated_step/seen' by hand", "keras.metrics.Mean")),
        # a trainable kernel rescaled by hand from the batch beside apply (before: ranks 1.9e-3 apart, silently):
        # stopped after the first step (before: at the first epoch's end), named (before k-progs7: unnamed)
        (
            "rescaled_step",
            (
                "trainable variables of the model are apart between the processes after training step 1",
                "'sequential/dense/kernel' the most",
                "kernel_constraint",
            ),
        ),
        # the same accumulation with a Dropout on each micro-batch (before: refused in the general words)
        ("accumulating_dropout_step", ("accumulates gradients over 4 parts", "gradient_accumulation_steps")),
    ],
)
def test_what_no_rows_can_reproduce_is_refused_on_every_rank(ddp, name, parts):
    """An added loss summed over the batch (keras-io's ActivityRegularizationLayer) is refused before any
    process starts; a batch-shaped draw no rows of one process's draw reproduce, at the draw, before
    anything is updated; on both ranks, with the reason."""
    zero, one = ranks(ddp, name)
    assert "error" in zero and zero["error"] == one["error"], zero
    for part in parts:
        assert part in zero["error"], zero["error"]


def test_a_step_whose_loss_is_not_a_mean_is_refused_before_any_training_step(ddp):
    """A train_step adding keras.ops.std(y_pred) to its loss (2 x 16 trained 6.8e-4 apart from Keras' own
    fit at 32 in 2 epochs, silently, before step_probe.py): refused on both ranks with the same reason when
    training begins, before either began a training batch, and the next programs of the launch still run."""
    zero, one = ranks(ddp, "batch_std_step")
    assert "error" in zero and zero["error"] == one["error"], zero
    for part in ("train_step is not a mean over the batch's samples", "3.90e-03", "or run on one process"):
        assert part in zero["error"], zero["error"]
    assert zero["batches_begun"] == one["batches_begun"] == 0
    assert "error" in ranks(ddp, "categorical_step")[0]  # the next program ran (and was refused at its draw)


def test_the_added_loss_probe_leaves_the_model_as_it_was():
    """The probe calls the model three times (two samples, then each alone): every variable, a drawing
    layer's SeedGenerator state included, and torch's generator are as before it; one process: no probe."""
    import keras_random_programs as programs

    from trainmesh.keras.added_losses import refuse_batch_sums

    model = programs.sampling_model()
    x, _ = programs.data(8)
    before = [np.array(v.numpy()) for v in model.variables]
    generator = torch.get_rng_state()
    refuse_batch_sums(model, x, world=2)  # its added losses: none
    summed = programs.added_loss(16)["model"]
    refuse_batch_sums(summed, x, world=1)
    with pytest.raises(ValueError, match="a sum over the samples"):
        refuse_batch_sums(summed, x, world=2)
    assert all(np.array_equal(a, np.array(v.numpy())) for a, v in zip(before, model.variables, strict=True))
    assert torch.equal(generator, torch.get_rng_state())


def test_an_activity_regularizer_that_is_no_mean_is_named_with_keras_division():
    """keras-io's PointNet regularizes a Dense layer's output with an OrthogonalRegularizer of its own; Keras 3
    divides an activity regularizer's value by the batch size, so one returning ops.mean (or coupling samples)
    is no mean over the batch. Refused as before, now naming the layer and that division (before: "Make it a mean
    over the batch (ops.mean instead of ops.sum ...)", which Keras' division turns into no mean again, k-progs7)."""
    import keras
    from trainmesh.keras.added_losses import refuse_batch_sums

    def mean_penalty(x):
        return 1e-2 * keras.ops.mean(keras.ops.square(x))

    inputs = keras.Input((6,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(4, activity_regularizer=mean_penalty, name="penalised")(inputs))
    model = keras.Model(inputs, outputs)
    x = np.random.default_rng(0).normal(size=(8, 6)).astype("float32")
    with pytest.raises(ValueError, match="activity_regularizer of layer 'penalised'") as refused:
        refuse_batch_sums(model, x, world=2)
    assert "whose value Keras divides by the batch size" in str(refused.value) and "ops.mean instead" not in str(
        refused.value
    )


def test_the_added_loss_probe_skips_only_a_model_it_cannot_call(monkeypatch):
    """added_losses.probe skips a model whose own call fails on its samples (one taking 2 samples only: not
    probed), and no other error: before, its broad except also turned an error of the probe's own code into
    'not probed' (simulated: Keras' convert_to_numpy, which only the probe calls, raising), which let a
    summed add_loss train at 1/N of its weight, silently."""
    import keras_random_programs as programs

    import keras
    from trainmesh.keras import added_losses

    summed = programs.added_loss(16)["model"]
    x, _ = programs.data(8)

    class Pairs(keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(keras.ops.sum(inputs))
            return keras.ops.reshape(inputs, [2, 6])  # 2 samples only

    inputs = keras.Input((6,), batch_size=2)
    pairs = keras.Model(inputs, keras.layers.Dense(1)(Pairs()(inputs)))
    pairs(x[:2])
    assert added_losses.probe(pairs, x[:2]) is None

    def broken(_value):
        raise RuntimeError("the probe's own error")

    monkeypatch.setattr(keras.ops, "convert_to_numpy", broken)
    with pytest.raises(RuntimeError, match="the probe's own error"):
        added_losses.refuse_batch_sums(summed, x, world=2)
