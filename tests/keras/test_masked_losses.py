"""A compiled loss reduced over a mask, or Keras' Dice over the whole batch (masked_losses.py): refused under 2
processes before any process starts.

Before: a per-token tagger (Embedding(mask_zero=True) + BiLSTM, sparse cross-entropy) trained 2 x 16 3.5e-3
apart from Keras' own fit at 32 in History, a Masking + GRU regression 2.6e-2, a segmentation with
SparseCategoricalCrossentropy(ignore_class=0) 1.4e-3 (predict 0.14), a segmentation with keras.losses.Dice()
weights 6.3e-3 (predict 4.3e-3), silently (/work/progs/k-progs4).
Each test runs in the launching process only: the refusal comes before any launch.
"""

import importlib.util
import os

import numpy as np
import pytest

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


@pytest.mark.parametrize(
    ("pooled", "loss", "named"),
    [
        (False, "sparse_categorical_crossentropy", "mask (from Embedding(mask_zero=True)"),
        (True, "ignore_class", "SparseCategoricalCrossentropy(ignore_class=0)"),
        (True, "sparse_categorical_crossentropy", None),  # the mask ends in the pooling: a per-sample loss
        (True, "dice", "Dice(axis=None) is computed over the whole batch"),  # one ratio of sums over the batch
        (True, "dice_per_sample", None),  # Dice(axis=(1,)): one value per sample, averaged
    ],
)
def test_a_loss_over_a_mask_is_refused_before_start_under_two_processes(pooled, loss, named):
    import keras
    import trainmesh.keras as tk
    from trainmesh.keras.masked_losses import refuse_masked_losses

    x, y = _tokens()
    if loss == "ignore_class":
        loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=0)
        y = y[:, :1]
    elif loss.startswith("dice"):
        loss = keras.losses.Dice(axis=(1,) if loss == "dice_per_sample" else None)
        y = keras.utils.to_categorical(y[:, 0] % 4, 4)
    model = _model(pooled, loss)
    before = [v.numpy().copy() for v in model.variables]
    refuse_masked_losses(model, x, world=1)  # one process: Keras' own numbers
    if named is None:
        refuse_masked_losses(model, x, world=2)
        return
    with pytest.raises(ValueError, match=r"devices=1\)$") as refused:
        tk.fit(model, x, y, batch_size=8, strategy="ddp", devices=2)
    assert named in str(refused.value) and ("sample_weight" in str(refused.value)) != ("Dice" in named)
    with pytest.raises(ValueError, match="divides by the count of unmasked positions|over the whole batch"):
        tk.evaluate(model, x, y, batch_size=8, strategy="ddp", devices=2)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables, strict=True))
