"""Keras programs drawing random numbers in their steps, and adding losses, for test_keras_random_draws.py:
each under Keras' own fit at the global batch (2 x 16) in the test process and under trainmesh.keras' ddp at 2
processes of 16 (one leg of the Keras programs' shared launch: keras_batch.py).

python keras_random_programs.py ddp OUT -> each rank writes OUT/<program>.rank{R}

- ``dropout``: a Sequential with ``GaussianNoise``, ``Dropout(0.5)`` (unseeded: Keras draws its mask from
  torch's generator) and ``Dropout(0.3, seed=7)`` (a SeedGenerator), arrays of 106 samples (the last global batch 8 + 7),
  ``validation_split``; ``dropout_loader`` the same on a DataLoader (split by sample), ``dropout_pydataset``
  on a PyDataset (split by batch: the processes' batches are blocks of one process's).
- ``drawing_step``: a ``train_step`` of its own drawing, as keras-io's GAN guide does, a batch of normal
  noise (``keras.random.normal((batch, d), seed=self.seed_generator)``) and uniform label noise for two
  stacked batch-sized parts (``keras.random.uniform((2 * batch, 1))``).
- ``sampling``: a layer drawing ``keras.random.normal`` of its input's shape in ``call`` (a VAE's
  ``Sampling``): in training, validation, ``evaluate`` (27 samples: 14 + 13) and ``predict``.
- ``batch_sum_loss``: ``self.add_loss(ops.sum(inputs) * 0.1)`` in a layer (keras-io's
  ``ActivityRegularizationLayer``): refused before training. ``batch_mean_loss``: the same as a mean.
- ``batch_std_step``: a ``train_step`` of its own adding ``keras.ops.std(y_pred)`` to its compiled loss (a
  term on a batch statistic, not a mean over the samples), with a Dropout: refused when training begins, before
  any training step (``BATCHES_BEGUN``), on both ranks (step_probe.py).
- ``categorical_step``: a step drawing ``keras.random.categorical`` of the batch's logits: refused at the draw.
- ``torch_drawing_step``: ``drawing_step`` drawing from torch's own functions (``torch.randn``,
  ``torch.randn_like``, ``torch.rand``, ``torch.nn.functional.dropout``); ``torch_poisson_step`` adds a
  ``torch.poisson`` of the batch's shape (refused at the draw).
- ``mixup_step``: keras-io's MixUp in a ``train_step``, its mixing weights from two ``keras.random.gamma`` of
  shape ``(batch, 1)`` (mapped as ``normal``); ``mixup_tensor_alpha``: their concentration a tensor of the
  batch's shape (refused at the draw).
- ``sampling_predict_pydataset``: ``sampling``'s model predicting a PyDataset: refused at the draw.
- ``tensor_method_step``: ``drawing_step`` drawing with a tensor's own methods (``torch.empty_like(x).normal_()``,
  ``bernoulli_`` with a tensor of probabilities, ``uniform_``: tensor_draws.py; before: 0.13 apart, silently);
  ``imported_draw_step``: with ``randn`` imported from torch by name before fit (refused when training begins);
  ``own_generator_step``: ``torch.randn(..., generator=GENERATOR)``, a ``torch.Generator`` of the program's own.
"""

import faulthandler
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import randn  # noqa: E402 -- imported by name, as a user's script may: no mapping sees its draws

import keras  # noqa: E402
from keras import ops  # noqa: E402

SEED = 0
GENERATOR = torch.Generator()  # a program's own, seeded in fresh()
BATCH = 16  # per process; Keras' own fit runs at 2 * BATCH


def data(samples: int, features: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(samples, features)).astype("float32")
    return x, (x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * rng.normal(size=(samples, 1))).astype("float32")


def fresh() -> None:
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    GENERATOR.manual_seed(SEED + 1)


class Rows(keras.utils.PyDataset):
    def __init__(self, x, y, batch, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return -(-len(self.x) // self.batch)

    def __getitem__(self, index):
        part = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[part], self.y[part]


def dropout_model() -> keras.Model:
    fresh()
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.GaussianNoise(0.1, seed=3),  # draws keras.random.normal(shape=...) by keyword
            keras.layers.Dropout(0.5),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.3, seed=7),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])
    return model


def dropout(batch: int, feed: str = "arrays") -> dict:
    model = dropout_model()
    x, y = data(106)
    if feed == "arrays":
        fit = {"x": x, "y": y, "batch_size": batch, "validation_split": 0.25, "shuffle": False}
    elif feed == "loader":  # 96 samples: 3 batches of 16 per process (the loader is split by sample)
        dataset = torch.utils.data.TensorDataset(torch.from_numpy(x[:93]), torch.from_numpy(y[:93]))
        fit = {"x": torch.utils.data.DataLoader(dataset, batch_size=batch)}
    else:  # the last global batch 16 + 14
        fit = {"x": Rows(x[:94], y[:94], batch)}
    return {"model": model, "fit": {**fit, "epochs": 2}}


def spatial_dropout(batch: int) -> dict:
    """SpatialDropout1D: keras.random.dropout with a noise_shape of the batch's (one mask per sample and
    channel), which the mapped draw makes the global batch's (before: the first training step failed,
    'The expanded size of the tensor (32) must match the existing size (16)'); an unseeded Dropout of the
    Conv1D's output, channels-first in memory (before: a contiguous global mask, rows apart, silently)."""
    fresh()
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Reshape((3, 2)),
            keras.layers.Conv1D(4, 2, padding="same", activation="relu"),
            keras.layers.SpatialDropout1D(0.4, seed=5),
            keras.layers.SpatialDropout1D(0.3),
            keras.layers.Dropout(0.3),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])
    x, y = data(106)
    fit = {"x": x, "y": y, "batch_size": batch, "validation_split": 0.25, "shuffle": False, "epochs": 2}
    return {"model": model, "fit": fit}


class DrawingStep(keras.Model):
    """A train_step of its own drawing batch-shaped noise from its SeedGenerator, as the GAN guide does."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = keras.layers.Dense(8, activation="tanh")
        self.head = keras.layers.Dense(1)
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.head(self.body(x))

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x, y = data
        batch = x.shape[0]
        noisy = x + 0.1 * keras.random.normal((batch, x.shape[1]), seed=self.seed_generator)
        targets = torch.concat([y, y], axis=0)
        targets = targets + 0.05 * keras.random.uniform(targets.shape, seed=self.seed_generator)
        self.zero_grad()
        loss = self.compute_loss(y=targets, y_pred=torch.concat([self(noisy), self(x)], axis=0))
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def drawing_step(batch: int) -> dict:
    fresh()
    model = DrawingStep()
    model(np.zeros((1, 6), "float32"))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = data(106)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}


class Sampling(keras.layers.Layer):
    """z = mean + exp(log_var / 2) * epsilon, epsilon drawn in every call (a VAE's sampling layer)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        mean, log_var = inputs
        epsilon = keras.random.normal(ops.shape(mean), seed=self.seed_generator)
        return mean + ops.exp(0.5 * log_var) * epsilon


def sampling_model() -> keras.Model:
    fresh()
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    z = Sampling()([keras.layers.Dense(2)(hidden), keras.layers.Dense(2)(hidden)])
    model = keras.Model(inputs, keras.layers.Dense(1)(z))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model


def sampling(batch: int) -> dict:
    x, y = data(133)
    fit = {"x": x[:106], "y": y[:106], "batch_size": batch, "epochs": 2, "shuffle": False, "validation_split": 0.25}
    return {
        "model": sampling_model(),
        "fit": fit,
        "evaluate": {"x": x[106:], "y": y[106:], "batch_size": batch},
        "predict": {"x": x[106:], "batch_size": batch},
    }


class AddedLoss(keras.layers.Layer):
    def __init__(self, reduce="sum", **kwargs):
        super().__init__(**kwargs)
        self.reduce = reduce

    def call(self, inputs):
        reduced = ops.sum(inputs) if self.reduce == "sum" else ops.mean(ops.sum(inputs, axis=1))
        self.add_loss(reduced * 0.01)
        return inputs


def added_loss(batch: int, reduce: str = "sum") -> dict:
    fresh()
    inputs = keras.Input((6,))
    hidden = AddedLoss(reduce)(keras.layers.Dense(8, activation="relu")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x, y = data(96)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}


BATCHES_BEGUN = [0]  # training batches begun by the programs' fits in this process


class CountBatches(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        BATCHES_BEGUN[0] += 1


class BatchStdStep(keras.Model):
    """keras-io's custom ``train_step`` (torch) with a term on the batch's spread of predictions added."""

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred) + 0.1 * ops.std(y_pred)
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        return self.compute_metrics(x, y, y_pred)


def batch_std_model() -> keras.Model:
    fresh()
    inputs = keras.Input((6,))
    hidden = keras.layers.Dropout(0.2)(keras.layers.Dense(8, activation="relu")(inputs))
    model = BatchStdStep(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def batch_std_step(batch: int) -> dict:
    x, y = data(96)
    fit = {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False, "callbacks": [CountBatches()]}
    return {"model": batch_std_model(), "fit": fit}


class CategoricalStep(keras.Sequential):
    def train_step(self, data):
        x, y = data
        keras.random.categorical(ops.zeros((x.shape[0], 3)), 1, seed=3)  # a draw per sample of the batch
        return super().train_step(data)


class MixUpStep(keras.Model):
    """keras-io's MixUp (vision/mixup.py) in a train_step: each sample mixed with its pair of a second set, the
    weights from a beta distribution sampled as the guide does, two gammas of shape (batch, 1); ``tensor_alpha``:
    the gammas' concentration a tensor of the batch's shape (refused at the draw: no rows reproduce it)."""

    def __init__(self, tensor_alpha=False, **kwargs):
        super().__init__(**kwargs)
        self.tensor_alpha = tensor_alpha
        self.body = keras.layers.Dense(8, activation="relu")
        self.head = keras.layers.Dense(1)
        self.seed_generator = keras.random.SeedGenerator(5)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.head(self.body(x))

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x_one, x_two, y_one, y_two = keras.utils.unpack_x_y_sample_weight(data)[0]
        shape = (x_one.shape[0], 1)
        alpha = ops.full(shape, 0.2) if self.tensor_alpha else 0.2
        gamma_one = keras.random.gamma(shape, alpha=alpha, seed=self.seed_generator)
        gamma_two = keras.random.gamma(shape, alpha=alpha, seed=self.seed_generator)
        weight = gamma_one / (gamma_one + gamma_two)
        x, y = x_one * weight + x_two * (1 - weight), y_one * weight + y_two * (1 - weight)
        self.zero_grad()
        loss = ops.mean(ops.square(y - self(x)))
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def mixup_step(batch: int, tensor_alpha: bool = False) -> dict:
    fresh()
    model = MixUpStep(tensor_alpha)
    model(np.zeros((1, 6), "float32"))
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    x, y = data(106)
    pairs = np.random.default_rng(1).permutation(len(x))
    return {
        "model": model,
        "fit": {"x": (x, x[pairs], y, y[pairs]), "batch_size": batch, "epochs": 2, "shuffle": False},
    }


class TorchDrawingStep(DrawingStep):
    """DrawingStep drawing from torch's own functions: targets noised with torch.randn_like, inputs with
    torch.randn of the batch's sizes and masked by torch.nn.functional.dropout, label noise of two stacked
    parts with torch.rand; ``poisson``: a torch.poisson of the batch's shape (refused at the draw)."""

    def __init__(self, poisson=False, **kwargs):
        super().__init__(**kwargs)
        self.poisson = poisson

    def train_step(self, data):
        x, y = data
        if self.poisson:
            x = x + torch.poisson(torch.ones_like(x))
        noisy = x + 0.1 * torch.randn(x.shape[0], x.shape[1])
        noisy = torch.nn.functional.dropout(noisy.T.contiguous().T, 0.3)  # feature-major in memory: masked so
        targets = torch.concat([y, y], axis=0) + 0.1 * torch.randn_like(torch.concat([y, y], axis=0))
        targets = targets + 0.05 * torch.rand(targets.shape)
        self.zero_grad()
        loss = self.compute_loss(y=targets, y_pred=torch.concat([self(noisy), self(x)], axis=0))
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def torch_drawing_step(batch: int, poisson: bool = False) -> dict:
    fresh()
    model = TorchDrawingStep(poisson)
    model(np.zeros((1, 6), "float32"))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = data(106)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}


class TensorMethodStep(DrawingStep):
    """DrawingStep drawing with a tensor's own methods; ``imported``: with a ``randn`` imported by name."""

    def __init__(self, imported=False, **kwargs):
        super().__init__(**kwargs)
        self.imported = imported

    def train_step(self, data):
        x, y = data
        if self.imported == "generator":
            noisy = (
                x
                + 0.1 * torch.randn(x.shape, generator=GENERATOR)
                + 0.1 * torch.empty_like(x).normal_(generator=GENERATOR)
            )
        elif self.imported:
            noisy = x + 0.1 * randn(x.shape[0], x.shape[1])
        else:
            keep = torch.full_like(x, 0.8).bernoulli_(torch.full_like(x, 0.8))  # a tensor of probabilities
            noisy = (x + 0.1 * torch.empty_like(x).normal_()) * keep * torch.empty(x.shape[0], 1).uniform_(0.9, 1.1)
        self.zero_grad()
        loss = self.compute_loss(y=y, y_pred=self(noisy))
        loss.backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def tensor_method_step(batch: int, imported: bool = False) -> dict:
    fresh()
    model = TensorMethodStep(imported)
    model(np.zeros((1, 6), "float32"))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = data(106)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}


def categorical_step(batch: int) -> dict:
    fresh()
    model = CategoricalStep([keras.Input((6,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = data(64)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 1, "shuffle": False}}


def sampling_predict_pydataset(batch: int) -> dict:
    x, y = data(64)
    return {"model": sampling_model(), "predict": {"x": Rows(x, y, batch)}}


PROGRAMS = {
    "dropout": dropout,
    "dropout_loader": lambda batch: dropout(batch, "loader"),
    "dropout_pydataset": lambda batch: dropout(batch, "pydataset"),
    "spatial_dropout": spatial_dropout,
    "drawing_step": drawing_step,
    "sampling": sampling,
    "batch_sum_loss": added_loss,
    "batch_mean_loss": lambda batch: added_loss(batch, "mean"),
    "batch_std_step": batch_std_step,
    "categorical_step": categorical_step,
    "mixup_step": mixup_step,
    "torch_drawing_step": torch_drawing_step,
    "torch_poisson_step": lambda batch: torch_drawing_step(batch, poisson=True),
    "mixup_tensor_alpha": lambda batch: mixup_step(batch, tensor_alpha=True),
    "sampling_predict_pydataset": sampling_predict_pydataset,
    "tensor_method_step": tensor_method_step,
    "imported_draw_step": lambda batch: tensor_method_step(batch, imported=True),
    "own_generator_step": lambda batch: tensor_method_step(batch, imported="generator"),
    "ema_step": lambda batch: __import__("keras_hand_update_programs").hand_updated(batch),
    "ema_later_step": lambda batch: __import__("keras_hand_update_programs").hand_updated(batch, later=True),
    "count_later_step": lambda b: __import__("keras_hand_update_programs").hand_updated(b, later=True, count_only=True),
    "rescaled_step": lambda b: __import__("keras_hand_update_programs").hand_updated(b, rescaled=True),
    "accumulating_step": lambda batch: __import__("keras_accumulating_programs").accumulating(batch),
    "accumulating_dropout_step": lambda batch: __import__("keras_accumulating_programs").accumulating(batch, 0.3),
}


def run(name: str, batch: int, distributed: bool) -> dict:
    """The program under Keras' own methods (one process) or trainmesh.keras' (ddp, 2 processes): History,
    every variable (seed generators' states included), the optimizer's state, evaluate and predict, and
    torch's generator state after it all."""
    import trainmesh.keras as tk

    program = PROGRAMS[name](batch)
    model = program["model"]
    launch = {"strategy": "ddp", "devices": 2} if distributed else {}
    result: dict = {}
    if "fit" in program:
        fit = tk.fit if distributed else lambda m, **k: m.fit(**k)
        result["history"] = fit(model, verbose=0, **launch, **program["fit"]).history
        result["optimizer"] = [np.array(v.numpy()) for v in model.optimizer.variables]
    if "evaluate" in program:
        evaluate = tk.evaluate if distributed else lambda m, **k: m.evaluate(**k)
        result["evaluate"] = evaluate(model, verbose=0, return_dict=True, **launch, **program["evaluate"])
    if "predict" in program:
        predict = tk.predict if distributed else lambda m, **k: m.predict(**k)
        result["predict"] = np.asarray(predict(model, verbose=0, **launch, **program["predict"]))
    result["variables"] = [np.array(v.numpy()) for v in model.variables]
    result["generator"] = torch.get_rng_state().numpy()
    return result


def run_ddp(out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for name in PROGRAMS:
        try:
            result = run(name, BATCH, distributed=True)
        except (ValueError, TypeError, RuntimeError) as error:  # a refusal: the next programs still run
            result = {"error": f"{type(error).__name__}: {error}", "batches_begun": BATCHES_BEGUN[0]}
        torch.save(result, os.path.join(out, f"{name}.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp}[sys.argv[1]](*sys.argv[2:])
