"""A compiled loss reduced over a mask, divided by the global batch's unmasked count at 2 processes
(masked_counts.py; a step of the program's own probed with the whole batch's count), against Keras' own fit at
the global batch; Keras' Dice over the whole batch refused before any process starts (masked_losses.py).

Before k-progs4: a per-token tagger (Embedding(mask_zero=True) + BiLSTM, sparse cross-entropy) trained 2 x 16
3.5e-3 apart from Keras' own fit at 32 in History, a Masking + GRU regression 2.6e-2, a segmentation with
SparseCategoricalCrossentropy(ignore_class=0) 1.4e-3 (predict 0.14), a segmentation with keras.losses.Dice()
weights 6.3e-3 (predict 4.3e-3), silently (/work/progs/k-progs4); k-progs4 refused them, k-masked runs the masked
ones exactly (keras_masked_programs.py, a leg of the Keras programs' shared launch: conftest.py). The refusal
tests run in the launching process only: the refusal comes before any launch.
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


def _tokens() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.integers(1, 20, size=(32, 6))
    x[np.arange(6)[None, :] >= rng.integers(1, 7, size=(32, 1))] = 0  # padded with 0, lengths 1..6
    return x.astype("int64"), np.where(x > 0, x % 3 + 1, 0).astype("int64")


def _model(pooled: bool = False, loss: object = "sparse_categorical_crossentropy") -> object:
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), dtype="int64")
    h = keras.layers.Embedding(20, 4, mask_zero=True)(inputs)
    h = keras.layers.GlobalAveragePooling1D()(h) if pooled else keras.layers.Dense(4, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(h))
    model.compile(optimizer="sgd", loss=loss)
    return model


def test_a_loss_over_the_unmasked_positions_is_not_a_mean_over_the_samples():
    """Why: Keras' own loss on a batch is not the mean of its halves' (their counts of unmasked positions differ)."""
    import keras

    _, y = _tokens()
    y_pred = keras.ops.softmax(np.random.default_rng(1).normal(scale=4.0, size=(32, 6, 4)).astype("float32"))
    loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=0)
    whole = float(loss(y, y_pred))
    halves = [float(loss(y[s], y_pred[s])) for s in (slice(0, 16), slice(16, None))]
    assert abs(whole - sum(halves) / 2) > 1e-3


def test_only_a_masked_mean_is_left_out_of_a_jit_compiled_step():
    """jit_compile=True: Keras torch.compile's the step, and dynamo traced the routed apply_mask (which processes
    take the step, the all-reduce of the counts) and failed in the first step under 2 processes
    ("InternalTorchDynamoError: TypeError: BooleanAtom not allowed in this context", /work/progs/k-probe/jit). A
    masked mean runs eagerly (a graph break; measured 2 x 16 against Keras' jit fit at 32: weights 6.0e-8, History
    6.0e-8). Keras calls apply_mask for every loss and metric: one with no mask, or a sum (masked metrics), is
    Keras' own and traced with the step (before, the whole routed function was disabled: a graph break at every
    loss of every jit-compiled ddp step, a loss with no mask too: 16 graph breaks in a 3-epoch jit fit of a
    Dense regression at 2 processes, 8 after, Keras' own 7; /work/progs/k-left jit.py). Compiling costs a minute
    here, and dynamo's first trace seconds: checked on the routed function's parts, under a runtime of 2 processes
    whose other one holds the same batch (so the global count gives Keras' own loss)."""
    from keras.src.losses import loss as keras_loss

    import keras
    from trainmesh.keras.masked_counts import over_the_global_count

    class TwoAlike:
        world_size = 2

        def all_reduce(self, flat, op):
            return flat * 2

    x, y = _tokens()
    y_pred = keras.ops.softmax(np.random.default_rng(1).normal(size=(32, 6, 4)).astype("float32"))
    loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=0)
    weight = torch.ones(32, 6)

    with over_the_global_count(TwoAlike(), lambda: [True, True], lambda: 32):
        routed_apply = keras_loss.apply_mask
        assert not getattr(routed_apply, "_torchdynamo_disable", False)  # traced with the step (before: disabled)
        closure = dict(zip(routed_apply.__code__.co_freevars, routed_apply.__closure__, strict=True))
        assert getattr(closure["masked_mean"].cell_contents, "_torchdynamo_disable", False)  # eager: a graph break
        assert routed_apply(weight, None, "float32", "sum_over_batch_size") is weight  # no mask: Keras' own
        routed = float(loss(y, y_pred))
    assert abs(routed - float(loss(y, y_pred))) < 1e-6


@pytest.mark.parametrize(("counts", "refused"), [([2, 2, 1], True), ([2, 1, 1], False), ([2, 2, 2], False)])
def test_an_evaluation_step_only_some_of_3_processes_take_is_refused_at_the_first_masked_loss(counts, refused):
    """3 processes, evaluation data of uneven shares (26 validation samples at 3 x 8: [2, 2, 1] steps): its last
    step, taken by processes 0 and 1 only, cannot sum a masked loss's count. Before, a RuntimeError at that step,
    after an epoch of training (the third process met a gloo "Connection closed by peer"; /work/progs/k-left
    three.py); now a ValueError at the call's first masked loss, the first training step, on every process. A
    last step rank 0 alone takes is its batch the global one ([2, 1, 1]): Keras' own, run."""
    import keras
    from trainmesh.keras.masked_counts import over_the_global_count

    class ThreeAlike:
        world_size = 3

        def all_reduce(self, flat, op):
            return flat * 3

    _, y = _tokens()
    y_pred = keras.ops.softmax(np.random.default_rng(1).normal(size=(32, 6, 4)).astype("float32"))
    loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=0)
    with over_the_global_count(ThreeAlike(), lambda: [True] * 3, lambda: 32, lambda: counts):
        if refused:
            with pytest.raises(ValueError, match=r"take \[2, 2, 1\] evaluation steps .* processes \[0, 1\] only"):
                loss(y, y_pred)
        else:
            assert (
                abs(
                    float(loss(y, y_pred))
                    - float(keras.losses.SparseCategoricalCrossentropy(ignore_class=0)(y, y_pred))
                )
                < 1e-6
            )


@pytest.mark.parametrize(
    ("loss", "named"),
    [
        ("dice", "Dice(axis=None) is computed over the whole batch"),  # one ratio of sums over the batch
        ("dice_per_sample", None),  # Dice(axis=(1,)): one value per sample, averaged
    ],
)
def test_a_loss_over_the_whole_batch_is_refused_before_start_under_two_processes(loss, named):
    import keras
    import trainmesh.keras as tk
    from trainmesh.keras.masked_losses import refuse_batch_wide_losses

    x, y = _tokens()
    model = _model(True, keras.losses.Dice(axis=(1,) if loss == "dice_per_sample" else None))
    y = keras.utils.to_categorical(y[:, 0] % 4, 4)
    before = [v.numpy().copy() for v in model.variables]
    refuse_batch_wide_losses(model, world=1)  # one process: Keras' own numbers
    if named is None:
        refuse_batch_wide_losses(model, world=2)
        return
    with pytest.raises(ValueError, match=r"devices=1\)$") as refused:
        tk.fit(model, x, y, batch_size=8, strategy="ddp", devices=2)
    assert named in str(refused.value)
    with pytest.raises(ValueError, match="over the whole batch"):
        tk.evaluate(model, x, y, batch_size=8, strategy="ddp", devices=2)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True))


TOLERANCE = 1e-5  # float rounding of sums over 2 processes' parts instead of one batch (measured: <= 4e-7)


@pytest.fixture(scope="module")
def ddp(keras_ddp_programs) -> Path:
    return keras_ddp_programs("keras_masked_programs")


def _largest_difference(a, b) -> float:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max([_largest_difference(a[k], b[k]) for k in a], default=0.0)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return max([_largest_difference(x, y) for x, y in zip(a, b, strict=True)], default=0.0)
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


@pytest.mark.parametrize("name", ["tagger", "segment", "masking", "own_step"])
def test_a_loss_over_a_mask_trains_at_2_processes_what_keras_trains_at_the_global_batch(ddp, name):
    """History, variables and evaluate within TOLERANCE of Keras' own fit at 32, ranks bit-identical. Before
    (k-progs4): refused before start (own_step: by the step probe, each half dividing by its own count); before
    that, a tagger's History 3.5e-3 apart (keras_masked_programs.py)."""
    import keras_masked_programs as programs

    zero, one = (torch.load(ddp / f"{name}.rank{r}", weights_only=False) for r in (0, 1))
    assert "error" not in zero, zero.get("error")
    assert _largest_difference(zero, one) == 0.0
    expected = programs.run(name, 2 * programs.BATCH, distributed=False)
    for key in expected:
        assert _largest_difference(expected[key], zero[key]) < TOLERANCE, key
