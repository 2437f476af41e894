"""An optimizer class of the user's own that overrides ``apply`` (or ``apply_gradients``, which a
train_step of the user's may call) runs its override on the gradients the step gives it: those
loss.backward() left are averaged already; others only in Keras' ``apply``, below the override (refused
there under several processes). On one process, tk.fit is Keras' own fit with it."""

import os

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
import trainmesh.keras as tk  # noqa: E402
from trainmesh.keras.optimizers import own_overrides, refuse_own_apply  # noqa: E402


class ClippingSGD(keras.optimizers.SGD):
    """Clips each gradient in its own apply: under 2 processes, each process's gradient would be clipped."""

    def apply(self, grads, trainable_variables=None):
        return super().apply([keras.ops.clip(g, -0.01, 0.01) for g in grads], trainable_variables)


class TfStyleSGD(keras.optimizers.SGD):
    """An apply_gradients of its own (Keras' torch train_step never calls it; a user's train_step may)."""

    def apply_gradients(self, grads_and_vars):
        return super().apply_gradients(grads_and_vars)


class OwnStep(keras.Sequential):
    def train_step(self, data):
        x, y = data
        self.zero_grad()
        loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        loss.backward()
        weights = list(self.trainable_weights)
        with torch.no_grad():
            self.optimizer.apply_gradients(zip([w.value.grad for w in weights], weights))
        return {"loss": loss.detach()}


def model(optimizer, cls=keras.Sequential):
    keras.backend.clear_session(free_memory=False)  # no gc.collect: it scans the whole heap of this process
    keras.utils.set_random_seed(0)
    built = cls([keras.Input((4,)), keras.layers.Dense(1)])
    built.compile(optimizer=optimizer, loss="mse")
    return built


x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x[:, :1] * 2.0


def test_an_optimizer_overriding_apply_is_decided_at_its_first_apply_not_before_start(monkeypatch):
    """2 processes: an override sees the gradients its step gives it, averaged where loss.backward() left
    them (Keras' own train_step: always), so nothing is refused before start (before: every override was,
    keras-io's gradient centralization too, which trains right); gradients computed otherwise are refused at
    the optimizer's first apply (tests/keras/test_keras_ddp.py), naming the override, why and what to do."""
    from trainmesh.runtime import Runtime

    class Launched(Exception):
        pass

    def launch(*args, **kwargs):
        raise Launched

    monkeypatch.setattr(Runtime, "launch", launch)
    with pytest.raises(Launched):
        tk.fit(model(ClippingSGD(0.1)), x, y, batch_size=16, strategy="ddp", devices=2)
    with pytest.raises(Launched):
        tk.fit(model(TfStyleSGD(0.1), OwnStep), x, y, batch_size=16, strategy="ddp", devices=2)
    with pytest.raises(ValueError, match=r"ClippingSGD overrides ClippingSGD.apply: .*loss.backward.*update_step"):
        refuse_own_apply(ClippingSGD(), ["ClippingSGD.apply"], 2)
    assert own_overrides(keras.optimizers.LossScaleOptimizer(ClippingSGD()), ("apply",)) == []  # averaged first
    refuse_own_apply(ClippingSGD(), ["ClippingSGD.apply"], 1)  # one process: Keras' own


def test_on_one_process_it_is_keras_own_fit():
    results = []
    for fit in ("keras", "tk"):
        built = model(ClippingSGD(0.1))
        arguments = {"batch_size": 16, "epochs": 1, "verbose": 0, "shuffle": False}
        history = built.fit(x, y, **arguments) if fit == "keras" else tk.fit(built, x, y, **arguments)
        results.append((history.history, [np.array(v.numpy()) for v in built.variables]))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(a, b)
