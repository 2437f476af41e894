"""A forward pass of the program's own (own_forward.py): probed under several processes, on one process with a
world size given to the probe (step_probe.refusal)."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


@pytest.mark.parametrize("combined", [True, False])
def test_a_forward_pass_of_its_own_combining_the_batch_s_samples_is_refused(combined):
    """keras-io's collaborative filtering RecommenderNet (a subclassed model, Keras' own compiled loss) adds
    ``ops.tensordot(user_vector, movie_vector, 2)``, a number from every sample of the batch, to each
    prediction: 2 x 16 trained 0.25 apart (History) from Keras' own fit at 32, silently, before own_forward.py
    had its step probed. Refused now, naming its call; the per-sample dot product (axis 1) passes, as do a
    Lambda layer of its own and a functional model's keras.ops (probed, not refused)."""
    import keras_random_programs as programs

    import keras
    from keras import ops
    from trainmesh.keras.step_probe import refusal

    class Recommender(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.users, self.movies = keras.layers.Embedding(12, 4), keras.layers.Embedding(9, 4)
            self.user_bias = keras.layers.Embedding(12, 1)

        def call(self, inputs):
            user, movie = self.users(inputs[:, 0]), self.movies(inputs[:, 1])
            dot = ops.tensordot(user, movie, 2) if combined else ops.sum(user * movie, axis=1, keepdims=True)
            return ops.sigmoid(dot + self.user_bias(inputs[:, 0]))

    programs.fresh()
    x = np.stack([np.arange(64) % 12, np.arange(64) % 9], axis=1)
    y = (x.sum(axis=1, keepdims=True) % 3 / 2.0).astype("float32")
    model = Recommender()
    model.compile(loss="binary_crossentropy", optimizer="adam")
    model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)  # built as fit builds it
    reason = refusal(model, x, y, None, None, world=2)
    assert (reason is not None) == combined
    if combined:
        for part in ("forward pass (Recommender.call) combines the samples", "ops.tensordot", "on one process"):
            assert part in reason, reason
    inputs = keras.Input((6,))
    distance = keras.layers.Lambda(lambda t: ops.sum(ops.square(t), axis=1, keepdims=True))(inputs)
    functional = keras.Model(inputs, keras.layers.Dense(1)(inputs) + distance)
    functional.compile(loss="mse", optimizer="sgd")
    x, y = programs.data(32)
    functional.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)
    assert refusal(functional, x, y, None, None, world=2) is None


def test_keras_own_mask_ops_are_not_a_forward_pass_of_its_own():
    """A functional model's Embedding(mask_zero=True) or Masking layer puts its compute_mask in the graph as
    keras.ops nodes (NotEqual, Any): Keras' own, sample by sample, not the program's forward pass (before: every
    such model was probed as "keras.ops.NotEqual in the functional model"). A keras.ops function the program applies
    to the same model's tensors still is."""
    import keras
    from keras import ops
    from trainmesh.keras.own_forward import forward_of_its_own

    tokens = keras.Input((5,), dtype="int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    tagger = keras.Model(tokens, keras.layers.Dense(3)(keras.layers.LSTM(4, return_sequences=True)(embedded)))
    steps = keras.Input((5, 1))
    masking = keras.Model(steps, keras.layers.GRU(2)(keras.layers.Masking(0.0)(steps)))
    assert forward_of_its_own(tagger) is None and forward_of_its_own(masking) is None
    pooled = keras.Model(tokens, keras.layers.Dense(1)(embedded + ops.sum(embedded, axis=0, keepdims=True)))
    assert forward_of_its_own(pooled) == "keras.ops.Sum in the functional model"


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_loss_a_layer_of_its_own_adds_only_in_training_is_named_in_the_refusal(reduce):
    """A layer of the program's own adding a penalty only in training (``if training: self.add_loss(...)``):
    added_losses.py's probe calls the model in inference and does not see it; the step probe refuses the sum
    (``ops.sum``: half of it at 2 x 16) but its reason spoke only of an output combining the samples
    (``ops.tensordot``), which the program does not compute (/work/progs/k-progs6 penalty_when_training). Now it
    names the add_loss and the fix; the mean passes."""
    import keras_random_programs as programs

    import keras
    from keras import ops
    from trainmesh.keras.step_probe import refusal

    class TrainingPenalty(keras.layers.Layer):
        def call(self, inputs, training=None):
            if training:
                self.add_loss(1e-2 * getattr(ops, reduce)(ops.square(inputs)))
            return inputs

    programs.fresh()
    x, y = programs.data(32)
    model = keras.Sequential(
        [keras.Input(x.shape[1:]), keras.layers.Dense(8), TrainingPenalty(), keras.layers.Dense(1)]
    )
    model.compile(loss="mse", optimizer="sgd")
    model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)
    reason = refusal(model, x, y, None, None, world=2)
    assert (reason is not None) == (reduce == "sum")
    if reason is not None:
        for part in ("add_loss in TrainingPenalty.call", "ops.mean instead of ops.sum", "on one process"):
            assert part in reason, reason
