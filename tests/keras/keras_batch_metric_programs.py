"""Programs whose compiled metrics update on a batch with other than the sum of their samples' updates,
run under Keras' own fit at the global batch and under trainmesh.keras' ddp at 2 processes
(test_batch_metrics.py compares them; the ddp runs are one leg of the Keras programs' launch).

python keras_batch_metric_programs.py ddp OUT -> each rank writes OUT/<program>.rank{R}

Each program is ``build(batch) -> (model, fit, evaluate)``; ``run`` records History, every variable, the
optimizer's state, evaluate, predict and what a program's ``Untouched`` callback saw written onto its
objects (keras_untouched.py). Metrics: a class counting the pairs of a batch's samples whose target is
the other's predicted class (quadratic in the batch), a function giving one number per batch (the spread
of the predictions: Keras wraps it in a Mean) and Keras' own accuracy.
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
from keras import ops  # noqa: E402

SEED = 0
BATCH = 16  # per process; Keras' own fit runs at 2 * BATCH
CLASSES = 4


class PairMatches(keras.metrics.Metric):
    """Pairs (i, j) of a batch with target j equal to the predicted class of i: b x b comparisons."""

    def __init__(self, name="pair_matches", **kwargs):
        super().__init__(name=name, **kwargs)
        self.matches = self.add_variable(shape=(), initializer="zeros", name="matches")

    def update_state(self, y_true, y_pred, sample_weight=None):
        predicted = ops.expand_dims(ops.argmax(y_pred, axis=-1), 1)  # (b, 1)
        targets = ops.expand_dims(ops.cast(ops.reshape(y_true, (-1,)), "int32"), 0)  # (1, b)
        self.matches.assign_add(ops.sum(ops.cast(ops.cast(predicted, "int32") == targets, "float32")))

    def result(self):
        return self.matches + 0.0  # a copy: History keeps what it is handed


def prediction_spread(y_true, y_pred):
    """One number per batch: the standard deviation of every prediction in it."""
    return ops.std(y_pred)


def classes(samples: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(samples, 6)).astype("float32")
    return x, (np.argmax(x[:, :CLASSES], axis=1) + (rng.random(samples) < 0.3)) % CLASSES


def compiled_model() -> keras.Model:
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(CLASSES, activation="softmax")]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss="sparse_categorical_crossentropy",
        metrics=[PairMatches(), prediction_spread, "accuracy"],
    )
    return model


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return -(-len(self.x) // self.batch)

    def __getitem__(self, index):
        part = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[part], self.y[part]


def pair_arrays(batch: int) -> tuple:
    """Arrays: 79 samples to train (the last global batch 8 + 7), 17 to validate and evaluate at batch
    ``batch // 2`` (the processes take 2 and 1 steps: the last one is rank 0's alone)."""
    model = compiled_model()
    x, y = classes(96)
    small = batch // 2
    fit = {"x": x[:79], "y": y[:79], "batch_size": batch, "epochs": 2, "shuffle": False,
           "validation_data": (x[79:], y[79:]), "validation_batch_size": small}  # fmt: skip
    return model, fit, {"x": x[79:], "y": y[79:], "batch_size": small}


def pair_batches(batch: int) -> tuple:
    """PyDatasets (the processes' batches are blocks of one process's): 94 samples to train (6 batches,
    the last global one 16 + 14), 40 to validate and evaluate (3 batches: the last, rank 0's alone)."""
    model = compiled_model()
    x, y = classes(134)
    fit = {"x": Batches(x[:94], y[:94], batch), "epochs": 2, "validation_data": Batches(x[94:], y[94:], batch)}
    return model, fit, {"x": Batches(x[94:], y[94:], batch)}


def shuffled(batch: int) -> tuple:
    """fit's default shuffle=True on arrays (with class_weight) and a DataLoader(shuffle=True), a Dropout
    layer drawing its masks: 79 samples (the last global batch 8 + 7), 2 epochs each."""
    model = compiled_model()
    dropout = keras.Sequential([keras.Input((6,)), keras.layers.Dropout(0.3), *model.layers])
    dropout.compile(optimizer=keras.optimizers.Adam(0.02), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = classes(96)
    data = torch.utils.data.TensorDataset(torch.from_numpy(x[:79]), torch.from_numpy(y[:79]))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True)
    fit = {"x": x[:79], "y": y[:79], "batch_size": batch, "epochs": 2, "class_weight": {0: 1.0, 1: 2.0, 2: 1.0, 3: 0.5},
           "again": {"x": loader, "epochs": 4, "initial_epoch": 2}}  # fmt: skip
    return dropout, fit, {"x": x[79:], "y": y[79:], "batch_size": batch}


class ByHand(keras.Model):
    """keras-io's "custom_train_step_in_torch" lower-level pattern: no compute_metrics; the steps update a
    loss tracker and the pair counter themselves and return ``{m.name: m.result() for m in self.metrics}``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.pairs = PairMatches()
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy()

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.loss_fn(y, y_pred)
        loss.backward()
        trainable = list(self.trainable_weights)
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in trainable], trainable)
        return self._update(loss, y, y_pred)

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        return self._update(self.loss_fn(y, y_pred), y, y_pred)

    def _update(self, loss, y, y_pred):
        self.loss_tracker.update_state(loss)
        self.pairs.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.loss_tracker, self.pairs]


def pair_by_hand(batch: int) -> tuple:
    """The pair counter updated by a step of the model's own: arrays as ``pair_arrays`` (refused under
    several processes: test_batch_metrics.py; not one of PROGRAMS)."""
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = ByHand(inputs, keras.layers.Dense(CLASSES, activation="softmax")(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.02))
    x, y = classes(96)
    fit = {"x": x[:79], "y": y[:79], "batch_size": batch, "epochs": 2, "shuffle": False,
           "validation_data": (x[79:], y[79:]), "validation_batch_size": batch // 2}  # fmt: skip
    return model, fit, {"x": x[79:], "y": y[79:], "batch_size": batch // 2}


class OwnStep(keras.Model):
    """keras-io's "custom_train_step_in_torch" pattern with compiled metrics: the steps compute the loss,
    apply the gradients, track the loss by hand (a Mean) and return ``self.compute_metrics(...)``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_loss = keras.metrics.Mean(name="step_loss")

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        loss.backward()
        trainable = list(self.trainable_weights)
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in trainable], trainable)
        self.step_loss.update_state(loss)
        return self.compute_metrics(x, y, y_pred)

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.step_loss.update_state(self.compute_loss(x=x, y=y, y_pred=y_pred, training=False))
        return self.compute_metrics(x, y, y_pred)


def pair_own_step(batch: int) -> tuple:
    """``OwnStep`` with the pair counter, the per-batch function and accuracy compiled, under zero1 (Adam of
    the program's own class), arrays as ``pair_arrays``; ``Untouched`` watching fit, evaluate and predict."""
    from keras_untouched import Untouched, WatchedAdam

    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = OwnStep(inputs, keras.layers.Dense(CLASSES, activation="softmax")(hidden))
    pairs = PairMatches()
    model.compile(
        optimizer=WatchedAdam(0.02),
        loss="sparse_categorical_crossentropy",
        metrics=[pairs, prediction_spread, "accuracy"],
    )
    watch = [Untouched(model, pairs)]
    x, y = classes(96)
    fit = {"x": x[:79], "y": y[:79], "batch_size": batch, "epochs": 2, "shuffle": False, "callbacks": watch,
           "validation_data": (x[79:], y[79:]), "validation_batch_size": batch // 2}  # fmt: skip
    return model, fit, {"x": x[79:], "y": y[79:], "batch_size": batch // 2, "callbacks": watch}


PROGRAMS = {
    "pair_arrays": pair_arrays,
    "pair_batches": pair_batches,
    "shuffled": shuffled,
    "pair_own_step": pair_own_step,
}
STRATEGIES = {"pair_own_step": "zero1"}  # the others: ddp


def run(name: str, batch: int, distributed: bool) -> dict:
    """The program under Keras' own methods (one process) or trainmesh.keras' (ddp, 2 processes)."""
    import keras_untouched

    import trainmesh.keras as tk

    model, fit, evaluate = PROGRAMS[name](batch)
    launch = {"strategy": STRATEGIES.get(name, "ddp"), "devices": 2} if distributed else {}
    again = fit.pop("again", None)
    keras_untouched.clear()
    history = [(tk.fit(model, verbose=0, **launch, **f) if distributed else model.fit(verbose=0, **f)).history
               for f in (fit, again) if f is not None]  # fmt: skip
    evaluate = {"verbose": 0, "return_dict": True, **evaluate}
    evaluated = tk.evaluate(model, **launch, **evaluate) if distributed else model.evaluate(**evaluate)
    result = {
        "history": history,
        "variables": [np.array(v.numpy()) for v in model.variables],
        "optimizer": [np.array(v.numpy()) for v in model.optimizer.variables],
        "evaluate": evaluated,
    }
    if name == "pair_own_step":  # predict watched too; what was written onto the program's objects
        predict = {"x": evaluate["x"], "batch_size": evaluate["batch_size"], "callbacks": evaluate["callbacks"]}
        result["predict"] = (
            tk.predict(model, verbose=0, **launch, **predict) if distributed else model.predict(verbose=0, **predict)
        )
        result["touched"] = keras_untouched.touched()
    return result


def run_ddp(out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for name in PROGRAMS:
        try:
            result = run(name, BATCH, distributed=True)
        except (ValueError, TypeError, RuntimeError) as error:
            result = {"error": f"{type(error).__name__}: {error}"}
        torch.save(result, os.path.join(out, f"{name}.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp}[sys.argv[1]](*sys.argv[2:])
