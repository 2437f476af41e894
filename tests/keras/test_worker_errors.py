"""An exception raised in a ddp_spawn/ddp_fork worker reaches the program as itself (worker_errors.py).

Keras' own fit raises what a callback raises, and a program catches it by its type (``except StopTraining``).
Under ddp_spawn/ddp_fork the workers run that fit, and torch's process context reported the exception as its
own ``ProcessRaisedException`` (the traceback as text): the program's ``except StopTraining`` missed it.
"""

import importlib.util
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


class StopTraining(RuntimeError):
    """A program's own exception, raised by its callback."""


def _raised(fit) -> BaseException:
    import keras

    class Stopper(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise StopTraining(f"stopped after epoch {epoch}")

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(Exception) as raised:  # noqa: PT011 -- the type is what is compared
        fit(model, x, x.sum(axis=1, keepdims=True), epochs=1, verbose=0, callbacks=[Stopper()])
    return raised.value


def test_a_callback_s_exception_in_a_worker_reaches_the_program_as_keras_fit_raises_it():
    """ddp_fork (ddp_spawn takes the same path: measured by hand) raises the callback's StopTraining with its
    message, as Keras' own fit does; torch's report, with the worker's traceback, is its cause."""
    from torch.multiprocessing import ProcessRaisedException

    import trainmesh.keras as tk

    expected = _raised(lambda model, *a, **k: model.fit(*a, batch_size=32, **k))
    got = _raised(lambda model, *a, **k: tk.fit(model, *a, batch_size=16, strategy="ddp_fork", devices=2, **k))
    assert type(got) is type(expected) is StopTraining
    assert str(got) == str(expected) == "stopped after epoch 0"
    assert isinstance(got.__cause__, ProcessRaisedException)
