"""A model class with a compile() of its own (keras-io's ZeroDCE pattern) on its way to ddp_spawn's
workers (custom_compile.py, through travel.Travelling), emulated in one process: the model pickled as
ddp_spawn sends it, and read back."""

import os
import pickle

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

keras = pytest.importorskip("keras")


class OwnCompile(keras.Model):
    """keras-io's ZeroDCE shape: compile(learning_rate) makes its optimizer and tracker after
    super().compile(); a train_step applying the optimizer itself."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def compile(self, learning_rate, **kwargs):
        super().compile(**kwargs)
        self.learning_rate = learning_rate
        self.optimizer = keras.optimizers.Adam(learning_rate)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        loss = keras.ops.mean(keras.ops.square(self(x) - y))
        loss.backward()
        variables = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in variables], variables)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


class ConfiguredCompile(OwnCompile):
    """The same with Keras' advice for a custom compile: get_compile_config / compile_from_config."""

    def get_compile_config(self):
        return {"learning_rate": self.learning_rate}

    def compile_from_config(self, config):
        self.compile(**config)


def built(cls):
    keras.utils.set_random_seed(0)
    model = cls()
    model.compile(learning_rate=0.05)
    return model


DATA = np.random.default_rng(0).random((64, 3)).astype("float32")
TARGET = DATA.sum(axis=1, keepdims=True)


def test_a_custom_compile_keras_cannot_replay_is_refused_before_start():
    """Keras rebuilds a pickled model without calling a compile() its class overrides (compile_from_config
    skips it, warning) yet marks it compiled: every ddp_spawn worker failed in fit with "'OwnCompile' object
    has no attribute 'optimizer'". Refused when the model is sent, with Keras' advice and ddp."""
    from trainmesh.keras.travel import Travelling
    from trainmesh.launchers.spawn import RefusedToTravel

    model = built(OwnCompile)
    scope = keras.saving.custom_object_scope({"OwnCompile": OwnCompile})
    with scope, pytest.warns(UserWarning, match="compile\\(\\)` was not called"):  # Keras' own rebuild
        rebuilt = pickle.loads(pickle.dumps(model))
    assert rebuilt.compiled and not hasattr(rebuilt, "optimizer")
    with pytest.raises(RefusedToTravel, match="OwnCompile overrides compile.*get_compile_config.*'ddp'"):
        pickle.dumps(Travelling(model))


def test_a_custom_compile_from_config_arrives_with_the_sender_s_optimizer_state():
    """A class following Keras' advice (compile_from_config calling its compile) arrives compiled, its Adam
    unbuilt where Keras' own compile_from_config builds it before loading the saved slots: Keras skipped the
    sender's moments and iterations ("Skipping variable loading"), and a second fit under ddp_spawn
    started them from zero (ZeroDCE: History 0.66 from one process's). After a first fit, the arrived model's
    next fit is bit-identical to the sender's own."""
    from trainmesh.keras.travel import Travelling

    sender = built(ConfiguredCompile)
    sender.fit(DATA, TARGET, batch_size=16, epochs=1, shuffle=False, verbose=0)
    arrived = pickle.loads(pickle.dumps(Travelling(sender))).model
    assert int(arrived.optimizer.iterations.numpy()) == 4
    expected = sender.fit(DATA, TARGET, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    assert arrived.fit(DATA, TARGET, batch_size=16, epochs=2, shuffle=False, verbose=0).history == expected
    for mine, theirs in zip(arrived.variables, sender.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
