"""A ``train_step`` accumulating gradients over micro-batches of its batch (keras_random_programs.py runs it in its ddp
leg; test_step_probe.py probes it on one process).

keras-io's gradient accumulation within a step (torch): the batch cut into ``parts`` micro-batches, a backward pass on
each (``loss / parts``), one apply of what ``.grad`` accumulated. A mean over the batch's samples: under 2 processes the
run is Keras' at the global batch (before: refused as "not a mean", 1.36 of the norm, /work/progs/k-probe).
``dropout``: a Dropout on each micro-batch, which no process can draw as one process at the global batch: refused
(before: refused in general words; without the probe it trained 5.1e-2 apart, silently).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported

import torch  # noqa: E402

import keras  # noqa: E402


class MicroBatchSteps(keras.Model):
    def __init__(self, *args, parts=2, **kwargs):
        super().__init__(*args, **kwargs)
        self.parts = parts

    def train_step(self, data):
        x, y = data
        size = x.shape[0] // self.parts
        self.zero_grad()
        for start in range(0, self.parts * size, size):
            part = slice(start, start + size)
            (self.compute_loss(y=y[part], y_pred=self(x[part], training=True)) / self.parts).backward()
        weights = self.trainable_weights
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
        return self.compute_metrics(x, y, self(x))


def accumulating(batch: int, dropout: float = 0.0) -> dict:
    import keras_random_programs as programs

    programs.fresh()
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    if dropout:
        hidden = keras.layers.Dropout(dropout)(hidden)
    model = MicroBatchSteps(inputs, keras.layers.Dense(1)(hidden), parts=4)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    x, y = programs.data(96)
    return {"model": model, "fit": {"x": x, "y": y, "batch_size": batch, "epochs": 2, "shuffle": False}}
