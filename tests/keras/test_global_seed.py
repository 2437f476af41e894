"""Keras' global seed generator travels to ddp_spawn's workers and back (global_seed.py, through
arguments.random_states), emulated in one process as a spawned worker starts: no global generator of its
own, Python's generator its own until the launching process's states arrive.

Measured before: a layer drawing ``keras.random.normal(shape)`` without a seed, in a program that drew
once before ``fit``, trained under ddp_spawn 1.25e-2 apart from Keras' own fit (2 x 16 against 32, 2
epochs), silently; and after a fit under ddp_spawn or ddp_fork the launching process's next unseeded draw
was not the one one process makes.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras")


class Noise(keras.layers.Layer):
    def call(self, x, training=False):
        return x + 0.1 * keras.random.normal(keras.ops.shape(x)) if training else x  # no seed: the global one


def program():
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    keras.random.uniform(())  # a draw before fit: Keras makes its global seed generator
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(1)(Noise()(keras.layers.Dense(8, activation="relu")(inputs))))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
    return model, x, x[:, :1].copy()


def test_an_unseeded_draw_trains_and_goes_on_as_in_one_process():
    """The worker fits from the launching process's global generator (weights bit-identical to Keras' own
    fit), and the launching process's next unseeded draw after adopting the result is one process's."""
    from keras.src.backend.common import global_state

    from trainmesh.keras.arguments import adopt_fit, fit_result, random_states, set_random_states

    model, x, y = program()
    model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    expected, next_draw = model.get_weights(), float(keras.random.uniform(()))

    parent, x, y = program()
    sent = random_states()  # what fit sends the workers
    worker, _, _ = program()
    global_state.set_global_attribute("global_seed_generator", None)  # a spawned worker: none of its own
    random.seed(1)
    set_random_states(sent)  # as training._fit does
    history = worker.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    for mine, theirs in zip(worker.get_weights(), expected, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    result = fit_result(worker, history)
    set_random_states(sent)  # the launching process, as it was when the workers started
    adopt_fit(parent, result)
    assert float(keras.random.uniform(())) == next_draw


def test_a_state_arrives_without_drawing_from_python_s_generator():
    """A process with no global generator takes one at the state sent, drawing nothing from Python's
    generator (Keras makes one from it); None leaves it without one, as Keras starts."""
    from keras.src.backend.common import global_state

    from trainmesh.keras import global_seed

    keras.utils.set_random_seed(0)
    keras.random.uniform(())
    sent = global_seed.state()
    expected = float(keras.random.uniform(()))
    global_state.set_global_attribute("global_seed_generator", None)
    python = random.getstate()
    global_seed.set_state(sent)
    assert random.getstate() == python
    assert float(keras.random.uniform(())) == expected
    global_seed.set_state(None)
    assert global_seed.state() is None
