"""Keras programs whose compiled loss Keras reduces over a mask, under Keras' own fit at the global batch and
under trainmesh.keras at 2 processes (test_masked_losses.py compares them; masked_counts.py).

python keras_masked_programs.py ddp OUT -> one launch of 2 processes, every program one after another; each
                                           rank writes OUT/<program>.rank{R} (the tests run this as a leg of
                                           keras_batch.py's launch)

- ``tagger``: Embedding(mask_zero=True) -> LSTM(return_sequences) -> a softmax per token, per-token
  sample_weight and a weighted metric (Keras multiplies the step's sample_weight by the mask's weight in place,
  and the weighted metric reads it after), 79 samples to train (the last global batch 8 + 7), 27 to validate
  (the last evaluation step rank 0's alone).
- ``segment``: SparseCategoricalCrossentropy(from_logits=True, ignore_class=0) on a tiny segmentation, zero1.
- ``masking``: Masking -> GRU(return_sequences) -> Dense, per-step mse.
- ``own_step``: a functional tagger of a Model class with a train_step of its own (so the step probe checks it),
  probed with the whole batch's count.
"""

import faulthandler
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402

SEED = 0
BATCH = 16  # per process; Keras' own fit runs at 2 * BATCH
STRATEGY = {"tagger": "ddp", "segment": "zero1", "masking": "ddp", "own_step": "ddp"}


def _tokens(samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Token sequences of lengths 1..8 padded with 0 (their parts' counts of tokens differ), a tag per token."""
    rng = np.random.default_rng(SEED)
    x = rng.integers(1, 20, size=(samples, 8))
    x[np.arange(8)[None, :] >= rng.integers(1, 9, size=(samples, 1))] = 0
    return x.astype("int64"), np.where(x > 0, x % 4 + 1, 0).astype("int64")


def tagger(batch: int) -> tuple[object, dict, dict]:
    x, y = _tokens(106)
    w = np.random.default_rng(1).uniform(0.2, 2.0, size=y.shape).astype("float32")
    model = keras.Sequential([
        keras.Input((8,), dtype="int64"),
        keras.layers.Embedding(20, 6, mask_zero=True),
        keras.layers.LSTM(5, return_sequences=True),
        keras.layers.Dense(5, activation="softmax"),
    ])  # fmt: skip
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  weighted_metrics=["accuracy"])  # fmt: skip
    fit = dict(x=x[:79], y=y[:79], sample_weight=w[:79], batch_size=batch, epochs=2, shuffle=False,
               validation_data=(x[79:], y[79:], w[79:]))  # fmt: skip
    return model, fit, dict(x=x[79:], y=y[79:], batch_size=batch)


def segment(batch: int) -> tuple[object, dict, dict]:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(96, 4, 4, 2)).astype("float32")
    y = (x[..., 0] > 0).astype("int64") + 1
    y[rng.uniform(size=y.shape) < rng.uniform(0.0, 0.8, size=(96, 1, 1))] = 0  # unlabelled, at a rate per image
    model = keras.Sequential([keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 1)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    return model, dict(x=x[:64], y=y[:64], batch_size=batch, epochs=2, shuffle=False), dict(x=x[64:], y=y[64:])


def masking(batch: int) -> tuple[object, dict, dict]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(96, 6, 2)).astype("float32")
    x[np.arange(6)[None, :] >= rng.integers(1, 7, size=(96, 1))] = 0.0
    y = np.cumsum(x[..., :1], axis=1).astype("float32")
    model = keras.Sequential([keras.Input((6, 2)), keras.layers.Masking(0.0), keras.layers.GRU(4, return_sequences=True),
                              keras.layers.Dense(1)])  # fmt: skip
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model, dict(x=x[:64], y=y[:64], batch_size=batch, epochs=2, shuffle=False), dict(x=x[64:], y=y[64:])


class OwnStep(keras.Model):
    def train_step(self, data):  # keras-io's custom steps call Keras' own pieces; this one all of it
        return super().train_step(data)


def own_step(batch: int) -> tuple[object, dict, dict]:
    x, y = _tokens(96)
    inputs = keras.Input((8,), dtype="int64")
    h = keras.layers.Embedding(20, 6, mask_zero=True)(inputs)
    h = keras.layers.GRU(5, return_sequences=True)(h)
    model = OwnStep(inputs, keras.layers.Dense(5, activation="softmax")(h))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model, dict(x=x[:64], y=y[:64], batch_size=batch, epochs=2, shuffle=False), dict(x=x[64:], y=y[64:])


PROGRAMS = {"tagger": tagger, "segment": segment, "masking": masking, "own_step": own_step}


def run(name: str, batch: int, distributed: bool) -> dict:
    """The program under Keras' own fit/evaluate (one process) or trainmesh.keras' (2 processes)."""
    import trainmesh.keras as tk

    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    model, fit, evaluate = PROGRAMS[name](batch)
    if distributed:
        launch = {"strategy": STRATEGY[name], "devices": 2}
        history = tk.fit(model, verbose=0, **launch, **fit).history
        evaluated = tk.evaluate(model, verbose=0, return_dict=True, **launch, **{"batch_size": batch, **evaluate})
    else:
        history = model.fit(verbose=0, **fit).history
        evaluated = model.evaluate(verbose=0, return_dict=True, **{"batch_size": batch, **evaluate})
    return {"history": history, "variables": [np.array(v.numpy()) for v in model.variables], "evaluate": evaluated}


def run_ddp(out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for name in PROGRAMS:
        try:
            result = run(name, BATCH, distributed=True)
        except (ValueError, TypeError, RuntimeError) as error:  # a refusal: the next programs still run
            result = {"error": f"{type(error).__name__}: {error}"}
        torch.save(result, os.path.join(out, f"{name}.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp}[sys.argv[1]](*sys.argv[2:])
