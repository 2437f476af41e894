"""Keras models whose ``train_step`` updates variables of their own by hand (keras_random_programs.py runs
them in its ddp leg; test_hand_updates.py probes them on one process).

- ``ema_step``: a step keeping, after its update, an EMA of its inputs' mean (``centre.assign``) and a count
  of the samples seen (``seen.assign_add(batch)``), which its ``call`` reads: each process would update
  them from its own part of the batch (refused, hand_updates.py). ``later``: from the second step on only
  (the probe runs the first): stopped at the first epoch's end, the processes' copies apart. ``count_only``: the
  count alone from the second step on, whose copies agree (each process counts its part): before, 2 x 16 trained
  with a count half Keras', silently; the probe runs the step again at the first epoch's end (hand_updates.moved_by_hand).
  ``rescaled``: a trainable kernel rescaled by hand from the batch beside apply (before: the ranks 1.9e-3 apart,
  silently): stopped at the first epoch's end, the trainable variables' copies apart. ``statistic``: a trainable
  variable no backward pass reaches, assigned from the batch's mean (keras-io's GAN with adaptive augmentation
  assigns its trainable ``probability`` from the batch's accuracy): refused before start, named.
- ``target_step``: BYOL-style, a target copy moved towards the model by ``assign`` and a count of steps
  (``assign_add(1)``): the same on every process, not refused.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported

import torch  # noqa: E402

import keras  # noqa: E402
from keras import ops  # noqa: E402


class HandUpdatedStep(keras.Model):
    """keras-io's custom ``train_step`` (torch) updating, after the optimizer, variables of its own."""

    def __init__(self, body, target=False, later=False, count_only=False, rescaled=False, statistic=False, **kwargs):
        super().__init__(**kwargs)
        self.body, self.target, self.later, self.count_only, self.rescaled = body, target, later, count_only, rescaled
        features = body.inputs[0].shape[-1]
        self.statistic = self.add_weight(shape=(), initializer="zeros", name="statistic") if statistic else None
        self.centre = self.add_weight(shape=(features,), initializer="zeros", trainable=False, name="centre")
        self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False, name="seen")

    def call(self, x, training=False):
        return self.body(x - self.centre, training=training)

    def train_step(self, data):
        x, y = data
        update = not self.later or int(self.optimizer.iterations) % 2 == 1  # later: not the first step
        update = update if not self.count_only else int(self.optimizer.iterations) >= 1  # every step after the first
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        weights = self.body.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
            if self.statistic is not None:  # trainable, assigned from the batch, read by no loss
                self.statistic.assign(0.9 * self.statistic + 0.1 * ops.mean(x))
            elif self.rescaled:  # a trainable kernel rescaled by hand from the batch, beside apply
                kernel = self.body.weights[0]
                kernel.assign(kernel * (1.0 - 0.01 * ops.mean(ops.abs(x))))
            elif self.target:  # moved towards the model's weights, and a count of the steps
                self.centre.assign(0.9 * self.centre + 0.1 * self.body.weights[1][: self.centre.shape[0]])
                self.seen.assign_add(1.0)
            elif update:  # from the batch: its inputs' mean, the samples it holds
                if not self.count_only:
                    self.centre.assign(0.9 * self.centre + 0.1 * ops.mean(x, axis=0))
                self.seen.assign_add(float(x.shape[0]))
        return self.compute_metrics(x, y, y_pred)


def hand_updated(  # noqa: PLR0913 -- the variants
    batch: int, target=False, samples=64, later=False, count_only=False, rescaled=False, statistic=False
) -> dict:
    import keras_random_programs as programs

    programs.fresh()
    body = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model = HandUpdatedStep(
        body, target=target, later=later, count_only=count_only, rescaled=rescaled, statistic=statistic
    )
    model.build((None, 6))  # the probe leaves a model Keras' build leaves unbuilt alone
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = programs.data(samples)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}
