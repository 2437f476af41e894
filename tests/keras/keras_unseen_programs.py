"""Keras 3 programs written as users write them, run under Keras' own fit at the global batch and
under trainmesh.keras' ddp at 2 processes (test_keras_unseen_programs.py compares them).

python keras_unseen_programs.py ddp OUT -> one launch of 2 processes, every program one after another;
                                           each rank writes OUT/<program>.rank{R} (the tests run this as a
                                           leg of keras_batch.py's launch)

Each program is ``build(batch) -> Program``: the compiled model, the arguments of ``fit`` (and of a second
``fit`` where the program continues with ``initial_epoch``), ``evaluate`` and ``predict``. ``run(name,
batch, distributed)`` runs it with Keras' own methods (``distributed=False``, one process) or with
``tk.fit``/``evaluate``/``predict`` under ddp at 2 processes, and records History, every variable, the
optimizers' states, what a callback of the program's own read from its logs, evaluate and predict.
Most fits are unshuffled; ``batch_shuffled`` and ``steps_shuffled`` shuffle as Keras does.
"""

import faulthandler
import os
import sys
from dataclasses import dataclass, field

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402

SEED = 0
BATCH = 16  # per process; Keras' own fit runs at 2 * BATCH


@dataclass
class Program:
    model: object
    fit: dict
    evaluate: dict
    predict: dict
    again: dict | None = None  # a second fit's arguments (it continues the first)
    optimizers: tuple = ()  # optimizers of the program's own besides model.optimizer
    logs: list = field(default_factory=list)  # what LogReader recorded


def tabular(samples: int, features: int = 8, classes: bool = True) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(samples, features)).astype("float32")
    signal = x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * rng.normal(size=(samples, 1))
    return x, ((signal > 0.3) if classes else signal).astype("float32")


def fresh() -> None:
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)


class LogReader(keras.callbacks.Callback):
    """A callback of the program's own: it keeps what Keras hands it (batch, epoch and evaluation logs)
    and the learning rate at each epoch's end."""

    def __init__(self, into: list):
        super().__init__()
        self.into = into

    def on_train_batch_end(self, batch, logs=None):
        self.into.append(("batch", batch, {k: float(v) for k, v in logs.items()}))

    def on_test_batch_end(self, batch, logs=None):
        self.into.append(("test_batch", batch, {k: float(v) for k, v in logs.items()}))

    def on_epoch_end(self, epoch, logs=None):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        self.into.append(("epoch", epoch, {**{k: float(v) for k, v in logs.items()}, "lr": lr}))


# 1. A subclassed model with train_step/test_step of its own: compute_loss, trackers listed in `metrics`.
class Regressor(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x):
        return self.out(self.hidden(x))

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(self.compute_loss(y=y, y_pred=y_pred))
        self.mae_metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def subclassed_step(batch: int, samples: int = 128) -> Program:
    fresh()
    model = Regressor()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    x, y = tabular(samples, classes=False)
    fit = {"x": x, "y": y, "batch_size": batch, "epochs": 3, "validation_split": 0.25, "shuffle": False}
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x, "batch_size": batch})


def uneven_tracker(batch: int) -> Program:
    """The same program on 106 samples: 79 to train (the last global batch 15: 8 + 7), 27 to validate."""
    return subclassed_step(batch, samples=106)


# 3. Two optimizers of the program's own in one train_step (a body and a head, GAN-style).
class TwoOptimizers(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = keras.Sequential([keras.layers.Dense(16, activation="tanh")], name="body")
        self.head = keras.Sequential([keras.layers.Dense(1, activation="sigmoid")], name="head")
        self.body_loss = keras.metrics.Mean(name="body_loss")
        self.head_loss = keras.metrics.Mean(name="head_loss")

    def call(self, x):
        return self.head(self.body(x))

    @property
    def metrics(self):
        return [self.body_loss, self.head_loss]

    def compile(self, body_optimizer, head_optimizer, loss_fn):
        super().compile()
        self.body_optimizer, self.head_optimizer, self.loss_fn = body_optimizer, head_optimizer, loss_fn

    def train_step(self, data):
        x, y = data
        for part, optimizer, tracker in (
            (self.head, self.head_optimizer, self.head_loss),
            (self.body, self.body_optimizer, self.body_loss),
        ):
            self.zero_grad()
            loss = self.loss_fn(y, self(x, training=True))
            loss.backward()
            weights = part.trainable_weights
            with torch.no_grad():
                optimizer.apply([w.value.grad for w in weights], weights)
            tracker.update_state(loss)
        return {m.name: m.result() for m in self.metrics}


def two_optimizers(batch: int) -> Program:
    fresh()
    model = TwoOptimizers()
    model(np.zeros((1, 8), "float32"))
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.7)
    model.compile(
        body_optimizer=keras.optimizers.SGD(schedule, momentum=0.5),
        head_optimizer=keras.optimizers.Adam(0.01),
        loss_fn=keras.losses.BinaryCrossentropy(),
    )
    x, y = tabular(128)
    fit = {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}
    program = Program(model, fit, {}, {"x": x, "batch_size": batch})
    program.optimizers = (model.body_optimizer, model.head_optimizer)
    return program


# 4. class_weight in fit, weighted validation data, compiled metrics and weighted_metrics.
def class_weights(batch: int) -> Program:
    fresh()
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(12, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="binary_crossentropy",
        metrics=["accuracy", keras.metrics.AUC(name="auc")],
        weighted_metrics=[keras.metrics.BinaryAccuracy(name="weighted_accuracy")],
    )
    x, y = tabular(160)
    weights = np.linspace(0.5, 2.0, 32).astype("float32")
    fit = {
        "x": x[:128], "y": y[:128], "batch_size": batch, "epochs": 2, "shuffle": False,
        "class_weight": {0: 1.0, 1: 3.0}, "validation_data": (x[128:], y[128:], weights),
    }  # fmt: skip
    evaluate = {"x": x[128:], "y": y[128:], "sample_weight": weights, "batch_size": batch}
    return Program(model, fit, evaluate, {"x": x[128:], "batch_size": batch})


# 5. Callbacks: EarlyStopping(restore_best_weights), ReduceLROnPlateau, one of the program's own reading logs.
def callbacks(batch: int) -> Program:
    fresh()
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8, activation="relu")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.3), loss="binary_crossentropy", metrics=["accuracy"])
    x, y = tabular(160)
    logs: list = []
    fit = {
        "x": x, "y": y, "batch_size": batch, "epochs": 12, "shuffle": False, "validation_split": 0.2,
        "callbacks": [
            keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=0.02, restore_best_weights=True),
            keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=0.03),
            LogReader(logs),
        ],
    }  # fmt: skip
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x, "batch_size": batch}, logs=logs)


# 6. A PyDataset with steps_per_epoch, a LearningRateSchedule.
class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return -(-len(self.x) // self.batch)

    def __getitem__(self, index):
        part = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[part], self.y[part]


def pydataset_steps(batch: int) -> Program:
    fresh()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    schedule = keras.optimizers.schedules.CosineDecay(0.05, decay_steps=8, alpha=0.1)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse", metrics=["mae"])
    x, y = tabular(192, classes=False)
    fit = {
        "x": Batches(x[:160], y[:160], batch), "epochs": 3, "steps_per_epoch": 2,
        "validation_data": Batches(x[160:], y[160:], batch),
    }  # fmt: skip
    return Program(model, fit, {"x": Batches(x[160:], y[160:], batch)}, {"x": Batches(x[160:], y[160:], batch)})


def pydataset_tracker(batch: int) -> Program:
    """``uneven_tracker`` on PyDatasets, whose batch sizes are known only once read (one process at 32
    reads the batches of 2 x 16 one at a time): 94 samples to train in batches of ``batch`` (16: 6
    batches, the last global one 16 + 14), 88 to validate (6: the last 16 + 8) with a LogReader reading
    every batch's logs, 70 to evaluate (5: the last 6 + none, one process's step only)."""
    fresh()
    model = Regressor()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    x, y = tabular(182, classes=False)
    logs: list = []
    train, validation = Batches(x[:94], y[:94], batch), Batches(x[94:], y[94:], batch)
    fit = {"x": train, "epochs": 3, "validation_data": validation, "callbacks": [LogReader(logs)]}
    evaluate = {"x": Batches(x[94:164], y[94:164], batch)}
    return Program(model, fit, evaluate, {"x": Batches(x[:94], y[:94], batch)}, logs=logs)


def loader_tracker(batch: int) -> Program:
    """The same on torch DataLoaders: 93 samples to train (split by sample: the last batches 15 + 14),
    70 to validate and evaluate (5 batches dealt in turn: the last step 6 samples on rank 0 only)."""
    fresh()
    model = Regressor()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    x, y = (torch.from_numpy(a) for a in tabular(163, classes=False))
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:93], y[:93]), batch_size=batch)
    validation = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[93:], y[93:]), batch_size=batch)
    fit = {"x": train, "epochs": 2, "validation_data": validation}
    return Program(model, fit, {"x": validation}, {"x": x[:93].numpy(), "batch_size": batch})


# 7. fit(initial_epoch=...) continuing a first fit, a LearningRateScheduler, validation_freq.
def initial_epoch(batch: int) -> Program:
    fresh()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="elu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.RMSprop(0.01), loss="mse", metrics=["mse"])
    x, y = tabular(128, classes=False)
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.01 / (1 + epoch))
    fit = {"x": x[:96], "y": y[:96], "batch_size": batch, "epochs": 2, "shuffle": False,
           "validation_data": (x[96:], y[96:]), "validation_freq": 2, "callbacks": [schedule]}  # fmt: skip
    again = {**fit, "epochs": 4, "initial_epoch": 2}
    return Program(model, fit, {"x": x[96:], "y": y[96:], "batch_size": batch}, {"x": x[96:]}, again=again)


# 8. A metric class of the program's own and sample_weight in fit.
class WorstError(keras.metrics.Metric):
    """The largest absolute error seen: its state is a running maximum, not a sum."""

    def __init__(self, name="worst_error", **kwargs):
        super().__init__(name=name, **kwargs)
        self.worst = self.add_variable(shape=(), initializer="zeros", name="worst")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.worst.assign(keras.ops.maximum(self.worst, keras.ops.max(keras.ops.abs(y_true - y_pred))))

    def result(self):
        return self.worst


def own_metric(batch: int) -> Program:
    fresh()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse", metrics=[WorstError(), "mae"])
    x, y = tabular(128, classes=False)
    weights = np.linspace(0.2, 1.8, 128).astype("float32")
    fit = {"x": x, "y": y, "sample_weight": weights, "batch_size": batch, "epochs": 2, "shuffle": False}
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x, "batch_size": batch})


# 11. A train_step clipping the gradients by their global norm by hand before applying them, and
# tracking that norm: both read the gradients backward leaves.
class ClippedByHand(Regressor):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.norm_tracker = keras.metrics.Mean(name="gradient_norm")

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric, self.norm_tracker]

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        weights = self.trainable_weights
        gradients = [w.value.grad for w in weights]
        norm = keras.ops.sqrt(sum(keras.ops.sum(g * g) for g in gradients))
        with torch.no_grad():
            self.optimizer.apply([g * keras.ops.minimum(1.0, 0.05 / norm) for g in gradients], weights)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        self.norm_tracker.update_state(norm)
        return {m.name: m.result() for m in self.metrics}


def clipped_by_hand(batch: int) -> Program:
    """106 samples: 79 to train (the last global batch 8 + 7), 27 to validate."""
    fresh()
    model = ClippedByHand()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    x, y = tabular(106, classes=False)
    fit = {"x": x, "y": y, "batch_size": batch, "epochs": 2, "validation_split": 0.25, "shuffle": False}
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x, "batch_size": batch})


# 12. shuffle="batch" (Keras permutes the samples inside each batch) with Dropout, then a shuffled fit.
def batch_shuffled(batch: int) -> Program:
    """120 samples (the last global batch 12 + 12): each Dropout row must meet the sample it meets in one
    process's batch, and torch's generator must go on as one process's for the second fit's shuffle."""
    fresh()
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.4),
         keras.layers.Dense(1, activation="sigmoid")]
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="binary_crossentropy", metrics=["accuracy"])
    x, y = tabular(140)
    fit = {"x": x[:120], "y": y[:120], "batch_size": batch, "epochs": 2, "shuffle": "batch",
           "validation_data": (x[120:], y[120:])}  # fmt: skip
    again = {**fit, "epochs": 3, "initial_epoch": 2, "shuffle": True}
    return Program(model, fit, {"x": x[120:], "y": y[120:], "batch_size": batch}, {"x": x[120:]}, again=again)


# 13. steps_per_epoch on arrays with fit's default shuffle=True: epochs go on through one permutation.
def steps_shuffled(batch: int) -> Program:
    """128 samples (4 global batches) at 3 steps per epoch: the second epoch ends the first permutation
    and begins a second one, as one process's loader does."""
    fresh()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.5), loss="mse", metrics=["mae"])
    x, y = tabular(128, classes=False)
    fit = {"x": x, "y": y, "batch_size": batch, "epochs": 3, "steps_per_epoch": 3}
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x[:40]})


# 14. A compute_metrics override adding an entry to Keras' own (weighted compiled metrics, sample_weight in fit).
class ExtraEntry(keras.Model):
    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        logs = super().compute_metrics(x, y, y_pred, sample_weight)
        logs["pred_mean"] = keras.ops.mean(y_pred)
        return logs


def extra_entry(batch: int) -> Program:
    """The compiled metrics' members (``mae``, ``rmse``) are in the step's logs under their own names, not the
    model's metric's (``compile_metrics``): found there, each is its summed state's result; before, weighted
    by the processes' batch sizes where Keras weighs by the sample weights (History 1.1e-3 apart)."""
    fresh()
    inputs = keras.Input((8,))
    model = ExtraEntry(inputs, keras.layers.Dense(1)(keras.layers.Dense(12, activation="relu")(inputs)))
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="mse",
        metrics=[keras.metrics.RootMeanSquaredError()],
        weighted_metrics=["mae"],
    )
    x, y = tabular(96, classes=False)
    weights = np.random.default_rng(SEED).uniform(0.2, 3.0, size=96).astype("float32")
    fit = {"x": x, "y": y, "sample_weight": weights, "batch_size": batch, "epochs": 2, "shuffle": False}
    return Program(model, fit, {"x": x, "y": y, "batch_size": batch}, {"x": x, "batch_size": batch})


PROGRAMS = {
    "subclassed_step": subclassed_step,
    "uneven_tracker": uneven_tracker,
    "two_optimizers": two_optimizers,
    "class_weights": class_weights,
    "callbacks": callbacks,
    "pydataset_steps": pydataset_steps,
    "pydataset_tracker": pydataset_tracker,
    "loader_tracker": loader_tracker,
    "initial_epoch": initial_epoch,
    "own_metric": own_metric,
    "clipped_by_hand": clipped_by_hand,
    "batch_shuffled": batch_shuffled,
    "steps_shuffled": steps_shuffled,
    "extra_entry": extra_entry,
}


def states(program: Program) -> list[np.ndarray]:
    optimizers = program.optimizers or (program.model.optimizer,)
    return [np.array(v.numpy()) for optimizer in optimizers for v in optimizer.variables]


def run(name: str, batch: int, distributed: bool) -> dict:
    """The program under Keras' own methods (one process) or trainmesh.keras' (ddp, 2 processes)."""
    import trainmesh.keras as tk

    program = PROGRAMS[name](batch)
    model = program.model
    launch = {"strategy": "ddp", "devices": 2}

    def fit(arguments):
        if distributed:
            return tk.fit(model, verbose=0, **launch, **arguments)
        return model.fit(verbose=0, **arguments)

    histories = [fit(program.fit).history]
    if program.again is not None:
        histories.append(fit(program.again).history)
    result = {"history": histories, "variables": [np.array(v.numpy()) for v in model.variables]}
    result.update(optimizer=states(program), logs=program.logs)
    if program.evaluate:
        evaluate = tk.evaluate if distributed else lambda m, **k: m.evaluate(**k)
        result["evaluate"] = evaluate(
            model, verbose=0, return_dict=True, **program.evaluate, **(launch if distributed else {})
        )
    predict = tk.predict if distributed else lambda m, **k: m.predict(**k)
    result["predict"] = np.asarray(predict(model, verbose=0, **program.predict, **(launch if distributed else {})))
    return result


def run_ddp(out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for name in PROGRAMS:
        try:
            result = run(name, BATCH, distributed=True)
        except (ValueError, TypeError, RuntimeError) as error:  # a refusal: the next programs still run
            result = {"error": f"{type(error).__name__}: {error}"}
        torch.save(result, os.path.join(out, f"{name}.rank{rank}"))
    # The callbacks program's LogReader reading evaluation batches of which the processes take 2 and 1.
    import trainmesh.keras as tk

    program = callbacks(BATCH)
    x, y = tabular(17)
    try:
        reader = LogReader([])
        tk.evaluate(program.model, x, y, batch_size=8, callbacks=[reader], verbose=0, strategy="ddp", devices=2)
        result = {"evaluated": True}
    except ValueError as error:
        result = {"error": str(error)}
    torch.save(result, os.path.join(out, f"uneven_test_logs.rank{rank}"))
    torch.save(rank_callbacks(rank), os.path.join(out, f"rank_callbacks.rank{rank}"))
    for fed in ("ratio", "weighted"):  # tk.evaluate with no fit before it
        model, x, y = masked_tagger(fed)
        try:
            result = tk.evaluate(model, x, y, batch_size=BATCH, verbose=0, return_dict=True, strategy="ddp", devices=2)
        except ValueError as error:
            result = {"error": str(error)}
        torch.save(result, os.path.join(out, f"evaluate_only_{fed}.rank{rank}"))


class MaskedTagger(keras.Model):
    """A tagger whose test_step of its own feeds its accuracy tracker the masked accuracy: ``ratio`` as
    sum(right * mask) / sum(mask) of the batch, ``weighted`` per position with sample_weight=mask."""

    def __init__(self, fed="ratio", **kwargs):
        super().__init__(**kwargs)
        self.fed = fed
        self.dense = keras.layers.Dense(3)
        self.acc_tracker = keras.metrics.Mean(name="acc")

    @property
    def metrics(self):
        return [self.acc_tracker]

    def call(self, x):
        return self.dense(x)

    def test_step(self, data):
        x, y = data
        logits = self(x)
        mask = keras.ops.cast(keras.ops.not_equal(y, 0), "float32")
        right = keras.ops.cast(keras.ops.equal(y, keras.ops.argmax(logits, axis=-1)), "float32") * mask
        if self.fed == "weighted":
            self.acc_tracker.update_state(right, sample_weight=mask)
        else:
            self.acc_tracker.update_state(keras.ops.sum(right) / keras.ops.sum(mask))
        return {m.name: m.result() for m in self.metrics}


def masked_tagger(fed: str) -> tuple:
    """The built, compiled tagger (never fit) and 64 sequences of 4 positions, 0 the padding."""
    fresh()
    model = MaskedTagger(fed)
    model.compile(loss="sparse_categorical_crossentropy", optimizer="sgd")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4, 5)).astype("float32")
    y = np.where(np.arange(4) < rng.integers(1, 5, size=(64, 1)), rng.integers(1, 3, size=(64, 4)), 0)
    model(x[:1])
    return model, x, y


class TrainBatches(LogReader):
    on_test_batch_end = keras.callbacks.Callback.on_test_batch_end  # reads training batches only


class TestBatches(LogReader):
    on_train_batch_end = keras.callbacks.Callback.on_train_batch_end  # reads evaluation batches only


def rank_callbacks(rank: int) -> dict:
    """The callbacks program's first epoch, each process with callbacks of its own, as under torchrun:
    rank 0 reads the training batches' logs only, rank 1 the evaluation batches' only."""
    import trainmesh.keras as tk

    program = callbacks(BATCH)
    reader = (TrainBatches if rank == 0 else TestBatches)(program.logs)
    arguments = {**program.fit, "epochs": 1, "callbacks": [reader]}
    try:
        history = tk.fit(program.model, verbose=0, strategy="ddp", devices=2, **arguments).history
    except (ValueError, RuntimeError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"history": history, "logs": program.logs}


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp}[sys.argv[1]](*sys.argv[2:])
