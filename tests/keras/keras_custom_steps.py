"""Keras models with their own ``train_step``, after keras-io's "Customizing what happens in fit()
with PyTorch" guide, for the multi-process tests (imported by keras_zero1_run.py, keras_callbacks_run.py
and their tests, which build the one-process references with the same functions).

- ``gan(fed)``: the guide's GAN (``compile(d_optimizer=, g_optimizer=, loss_fn=)``, a ``train_step``
  applying ``self.d_optimizer`` then ``self.g_optimizer``, two ``keras.metrics.Mean`` trackers),
  with small dense networks on generated 16-d points. The guide draws its latent vectors and label
  noise inside ``train_step`` from ``keras.random`` with a ``SeedGenerator``: every process draws the
  same numbers for its half-batch, so 2 processes at B/2 cannot see what one process sees at B.
  ``fed=True`` draws them the same way (``keras.random`` with a ``SeedGenerator``), but once for the
  whole data set, before ``fit``, and passes them as columns of ``x``: each sample keeps its latent
  vectors whichever process trains it, so the comparison with one process is exact.
  ``fed=False`` is the guide's ``train_step`` as published (draws per step).
- ``WeightedStep``: a ``train_step`` reading ``sample_weight`` and calling ``apply_gradients``;
  ``TorchOptimizerStep``: one stepping a torch optimizer instead.
- ``custom_step()``: the guide's first ``CustomModel`` (``return {m.name: m.result() for m in
  self.metrics}``), with a ``keras.metrics.Mean("abs_error")`` tracker of its own and the step's
  plain ``batch_loss`` tensor in what it returns.
"""

import os

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402

SEED = 0
DIM, LATENT = 16, 8
SAMPLES = 128  # 2 epochs of 4 global batches of 32 (2 processes at 16)
BATCH = 16  # per process; one process runs at 2 * BATCH


class GAN(keras.Model):
    """The guide's GAN (``fed``: the random draws read from the batch instead, see the module's doc)."""

    def __init__(self, discriminator, generator, latent_dim, fed=False):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.fed = fed
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.built = True

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def draw(self, batch, name, shape, uniform=False):
        if self.fed:
            return batch[name]
        if uniform:
            return keras.random.uniform(shape, seed=self.seed_generator)
        return keras.random.normal(shape, seed=self.seed_generator)

    def train_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        real_images = batch["real"] if self.fed else batch
        batch_size = real_images.shape[0]
        random_latent_vectors = self.draw(batch, "latent_d", (batch_size, self.latent_dim))
        generated_images = self.generator(random_latent_vectors)
        combined_images = torch.concat([generated_images, real_images], axis=0)
        labels = torch.concat([torch.ones((batch_size, 1)), torch.zeros((batch_size, 1))], axis=0)
        # Add random noise to the labels - important trick!
        noise = self.draw(batch, "noise", (batch_size, 2), uniform=True)
        labels += 0.05 * torch.concat([noise[:, :1], noise[:, 1:]], axis=0)

        # Train the discriminator
        self.zero_grad()
        predictions = self.discriminator(combined_images)
        d_loss = self.loss_fn(labels, predictions)
        d_loss.backward()
        grads = [v.value.grad for v in self.discriminator.trainable_weights]
        with torch.no_grad():
            self.d_optimizer.apply(grads, self.discriminator.trainable_weights)

        random_latent_vectors = self.draw(batch, "latent_g", (batch_size, self.latent_dim))
        misleading_labels = torch.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights of the discriminator)!
        self.zero_grad()
        predictions = self.discriminator(self.generator(random_latent_vectors))
        g_loss = self.loss_fn(misleading_labels, predictions)
        g_loss.backward()
        grads = [v.value.grad for v in self.generator.trainable_weights]
        with torch.no_grad():
            self.g_optimizer.apply(grads, self.generator.trainable_weights)

        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def gan(fed: bool) -> tuple:
    """The compiled GAN (the same in every process: the same seed) and its data (x for fit)."""
    # Keras' option for a loop of models: no gc.collect, which scans torch's whole heap (0.17 CPU-s a call)
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    discriminator = keras.Sequential(
        [keras.Input((DIM,)), keras.layers.Dense(32), keras.layers.LeakyReLU(0.2), keras.layers.Dense(1)],
        name="discriminator",
    )
    generator = keras.Sequential(
        [keras.Input((LATENT,)), keras.layers.Dense(32), keras.layers.LeakyReLU(0.2), keras.layers.Dense(DIM)],
        name="generator",
    )
    model = GAN(discriminator, generator, LATENT, fed=fed)
    model.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(SEED)
    real = (rng.normal(size=(SAMPLES, DIM)) * 0.5 + np.linspace(-1, 1, DIM)).astype("float32")
    if not fed:
        return model, real
    seed = keras.random.SeedGenerator(1337)  # drawn once, as the guide draws them, for every sample
    x = {
        "real": real,
        "latent_d": np.asarray(keras.random.normal((SAMPLES, LATENT), seed=seed)),
        "latent_g": np.asarray(keras.random.normal((SAMPLES, LATENT), seed=seed)),
        "noise": np.asarray(keras.random.uniform((SAMPLES, 2), seed=seed)),
    }
    return model, x


class CustomModel(keras.Model):
    """The guide's first custom ``train_step`` and its ``test_step``, with a tracker of its own and
    the step's plain loss tensor in what they return."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.abs_error = keras.metrics.Mean(name="abs_error")

    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        trainable_weights = [v for v in self.trainable_weights]
        gradients = [v.value.grad for v in trainable_weights]
        with torch.no_grad():
            self.optimizer.apply(gradients, trainable_weights)
        return self.results(y, y_pred, loss)

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        return self.results(y, y_pred, self.compute_loss(y=y, y_pred=y_pred))

    def results(self, y, y_pred, loss):
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            elif metric.name == "abs_error":
                metric.update_state(torch.abs(y - y_pred))
            else:
                metric.update_state(y, y_pred)
        return {**{m.name: m.result() for m in self.metrics}, "batch_loss": loss.detach()}


class WeightedStep(keras.Sequential):
    """A ``train_step`` of its own that reads the batch's sample weights (``unpack_x_y_sample_weight``),
    weighs the compiled loss and metrics with them, and applies the gradients with ``apply_gradients``."""

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
        loss.backward()
        weights = list(self.trainable_weights)
        with torch.no_grad():
            self.optimizer.apply_gradients(zip([w.value.grad for w in weights], weights))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


class TorchOptimizerStep(keras.Sequential):
    """A ``train_step`` updating the weights with a torch optimizer, not a Keras one (which trainmesh
    would average): refused after its first step under several processes."""

    def train_step(self, data):
        x, y = data
        if not hasattr(self, "torch_optimizer"):
            self.torch_optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        self.torch_optimizer.zero_grad()
        loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        loss.backward()
        self.torch_optimizer.step()
        TORCH_STEPS[0] += 1
        return {"loss": loss.detach()}


TORCH_STEPS = [0]  # the training steps TorchOptimizerStep took


class ClippingSGD(keras.optimizers.SGD):
    """An optimizer class overriding ``apply`` (it clips): under several processes it would clip each
    process's own gradients."""

    def apply(self, grads, trainable_variables=None):
        return super().apply([keras.ops.clip(g, -0.01, 0.01) for g in grads], trainable_variables)


class SecondOptimizerStep(keras.Sequential):
    """A ``train_step`` applying an optimizer of its own (a ClippingSGD), not the compiled one, on gradients
    of ``torch.autograd.grad`` (averaged only in Keras' apply, below the override): refused under several
    processes (before training, by the step probe)."""

    def train_step(self, data):
        x, y = data
        if not hasattr(self, "own_optimizer"):
            self.own_optimizer = ClippingSGD(0.1)
        loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        weights = list(self.trainable_weights)
        gradients = torch.autograd.grad(loss, [w.value for w in weights])
        with torch.no_grad():
            self.own_optimizer.apply(list(gradients), weights)
        return {"loss": loss.detach()}


class OwnTruePositives(keras.metrics.Metric):
    """A metric class of the program's own, its state a weighted count (``assign_add``)."""

    def __init__(self, name="own_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        hits = keras.ops.cast(keras.ops.reshape(y_pred, (-1,)) > 0.5, "float32")
        hits = hits * keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "float32")
        if sample_weight is not None:
            hits = hits * keras.ops.reshape(keras.ops.cast(sample_weight, "float32"), (-1,))
        self.count.assign_add(keras.ops.sum(hits))

    def result(self):
        return self.count


CUSTOM_SAMPLES = 128  # validation_split=0.2: 102 to train (the last global batch 3 + 3), 26 to validate (13 + 13)


class SquaredError(keras.metrics.Mean):
    """A program's own metric class: the mean squared error, as a Mean of its own."""

    def __init__(self, name="squared_error", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(keras.ops.square(y_true - y_pred), sample_weight=sample_weight)


def custom_step(first_layer=None, metrics=("mae",)) -> tuple:
    """The compiled CustomModel and its regression data (x, y); ``first_layer``: a layer class of
    the program's own put before the hidden layer."""
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((12,))
    hidden = keras.layers.Dense(16, activation="relu")(first_layer()(inputs) if first_layer else inputs)
    model = CustomModel(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=[*metrics])
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(CUSTOM_SAMPLES, 12)).astype("float32")
    y = (x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * rng.normal(size=(CUSTOM_SAMPLES, 1))).astype("float32")
    return model, x, y


class Penalized(keras.Model):
    """``compute_loss`` and ``compute_metrics`` of its own (the hooks keras' Trainer documents for this):
    the compiled loss plus an L2 penalty on the kernels, and the compiled metrics plus the batch's mean
    prediction (a plain tensor, so Keras' epoch logs are the last step's own dict)."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
        kernels = [w for w in self.trainable_weights if w.path.endswith("kernel")]
        return loss + 1e-3 * sum(keras.ops.sum(keras.ops.square(w)) for w in kernels)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        logs = super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        return {**logs, "prediction_mean": keras.ops.mean(y_pred)}


def penalized(x_features: int = 12) -> "Penalized":
    """A compiled Penalized binary classifier (the same in every process: the same seed)."""
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((x_features,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    model = Penalized(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=["accuracy"])
    return model
