"""What ddp_spawn pickles beside the model, refused before any process starts in a Keras user's words
(spawn_arguments.py)."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

keras = pytest.importorskip("keras")
import trainmesh.keras as tk  # noqa: E402


def test_a_callback_that_cannot_be_pickled_is_refused_with_advice_a_keras_program_can_follow(monkeypatch):
    """keras-io's usual LearningRateScheduler(lambda epoch, lr: ...) made inside a function, under ddp_spawn:
    refused before any process starts, naming the callback's part and what a Keras program can do (a def at
    the top level, on_train_begin, ddp / ddp_fork). Before: the launcher's "Make it picklable (e.g. build it
    in setup())", the Trainer's hook, which Keras has no."""
    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda *a, **k: pytest.fail("a process was started"))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).random((64, 4)).astype("float32")
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5)
    with pytest.raises(
        ValueError, match="(?s)callbacks\\[0\\].schedule cannot be pickled.*on_train_begin.*'ddp_fork'"
    ) as refused:
        tk.fit(model, x, x[:, :1], batch_size=16, verbose=0, strategy="ddp_spawn", devices=2, callbacks=[scheduler])
    assert "setup()" not in str(refused.value)
