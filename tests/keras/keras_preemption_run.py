"""The program of test_keras_preemption (trainmesh's ddp re-runs the script it is in, once per process).

STOP_AT=AT python keras_preemption_run.py ROOT -> a 2-process fit; after global batch AT rank 0 sends
                                                SIGTERM to trainmesh's agent (as SLURM or Kubernetes would),
                                                which forwards it: the run saves and exits 75
python keras_preemption_run.py ROOT         -> the same fit again (it resumes by itself), then the same fit
                                                in a fresh folder, never stopped; every rank writes
                                                ROOT/resumed.rank{R} and ROOT/reference.rank{R}
The same command line both times (the stop point in the environment): a resume takes only the state its
own program saved, and another command line is another program (trainer/run_identity.py).

Each worker runs in a folder of its own, ROOT/cwd.rank{R}: rank 0's alone may get the saved state, and the
other ranks resume from it without seeing it. The fit has what makes an exact resume hard: shuffle=True,
a Dropout without a seed (both draw from torch's generator), Adam's state, a mid-epoch stop, and a custom
train_step applying a second optimizer (the head's), whose state must come back too.
"""

import faulthandler
import os
import signal
import sys
import time

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

BATCH = 8  # per process: 128 training samples are 8 batches per epoch on each of 2 processes
EPOCHS = 3


def build():
    import keras

    # the same variable paths in each fit of a process
    # Keras' option for a loop of models: no gc.collect, which scans torch's whole heap (0.17 CPU-s a call)
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)

    class HeadOptimizer(keras.Sequential):
        """keras-io's custom train_step (PyTorch guide), with the last layer trained by an optimizer of
        its own: its Adam state must be saved and given back on resume like model.optimizer's."""

        def compile(self, head_optimizer=None, **kwargs):
            super().compile(**kwargs)
            self.head_optimizer = head_optimizer

        def train_step(self, data):
            x, y = data
            self.zero_grad()
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            loss.backward()
            head = self.layers[-1].trainable_weights
            body = [v for v in self.trainable_weights if not any(v is h for h in head)]
            with torch.no_grad():
                self.optimizer.apply([v.value.grad for v in body], body)
                self.head_optimizer.apply([v.value.grad for v in head], head)
            for metric in self.metrics:
                metric.update_state(loss) if metric.name == "loss" else metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    model = HeadOptimizer(
        [
            keras.Input((12,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        head_optimizer=keras.optimizers.Adam(0.02),
        loss="binary_crossentropy",
        metrics=["accuracy"],
    )
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 12)).astype("float32")
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0.5).astype("float32")


def fit(callbacks: list) -> dict:
    import trainmesh.keras as tk

    model = build()
    x, y = data()
    history = tk.fit(
        model, x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, validation_split=0.2, verbose=0,
        callbacks=callbacks, strategy="ddp", devices=2,
    )  # fmt: skip
    return {
        "variables": {v.path: np.array(v.numpy()) for v in model.variables},
        "optimizer": [np.array(v.numpy()) for v in model.optimizer.variables],
        "head_optimizer": [np.array(v.numpy()) for v in model.head_optimizer.variables],
        "history": history.history,
        "epoch": history.epoch,
    }


def stopper(at: int):
    """After global batch ``at`` rank 0 signals the agent; from then on every batch takes 50 ms more, so that
    the run cannot end before the signal has travelled (the agent forwards it)."""
    import keras

    done = [0]

    def on_batch_end(batch, logs):
        done[0] += 1
        if done[0] == at and os.environ.get("RANK") == "0":
            os.kill(os.getppid(), signal.SIGTERM)
        if done[0] >= at:
            time.sleep(0.05)

    return keras.callbacks.LambdaCallback(on_train_batch_end=on_batch_end)


def main(root: str) -> None:
    from trainmesh.supervision import stop_agreement

    stop_agreement.EXCHANGE_EVERY_SECONDS = 0  # the ranks exchange stop requests after every batch
    rank = os.environ.get("RANK")
    if rank is not None:  # a worker: in its own folder
        os.makedirs(os.path.join(root, f"cwd.rank{rank}"), exist_ok=True)
        os.chdir(os.path.join(root, f"cwd.rank{rank}"))
    if os.environ.get("STOP_AT"):
        fit([stopper(int(os.environ["STOP_AT"]))])
        raise AssertionError("the fit was not stopped")
    resumed = fit([])
    torch.save(resumed, os.path.join(root, f"resumed.rank{rank}"))
    if rank is not None:
        os.makedirs(os.path.join(root, f"reference.cwd.rank{rank}"), exist_ok=True)
        os.chdir(os.path.join(root, f"reference.cwd.rank{rank}"))
    torch.save(fit([]), os.path.join(root, f"reference.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    main(*sys.argv[1:])
