"""A preempted trainmesh.keras fit on one process (in this process: SIGTERM from a callback) resumed by the
same fit: Keras' own fit, with a model class overriding ``make_train_function``.

On one process ``tk.fit`` is Keras' own fit, so a class overriding Keras' step function maker runs as Keras
runs it. Only a resume mid-epoch depends on trainmesh's step function, which passes over the batches
trained before the stop: a maker of the program's own leaving another function in ``train_function``
went around it, and the resumed fit trained those batches again (weights 1.9e-2 from Keras' own fit never
stopped, silently). It is refused when training begins now; a maker calling Keras' own resumes exactly.

Two scripts sharing a working directory whose fits name the same folder (a sweep's, differing only in the
learning rate here): script B, run fresh, resumed the state script A's preempted fit left and ended 0.19
from its own fit (Keras' own), then removed A's state. The state records its run now (``run_identity``,
as the Trainer's checkpoints) and only the program that saved it resumes or removes it.
"""

import itertools
import logging
import os
import signal

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras")
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")


class OwnMaker(keras.Model):
    """A step function of its own, calling train_step as Keras' does."""

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function

        def one_step(data):
            return self.train_step(data[0])

        self.train_function = one_step
        return one_step


class KerasMaker(keras.Model):
    def make_train_function(self, force=False):
        return super().make_train_function(force)


class Stop(keras.callbacks.Callback):
    """SIGTERM to this process after the 6th training batch (the second of the second epoch)."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == 6:
            os.kill(os.getpid(), signal.SIGTERM)


def program(cls, lr=0.01):
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    model = cls(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(lr), loss="mse", metrics=["mae"])
    x = np.random.default_rng(0).random((64, 5)).astype("float32")
    return model, x, x[:, :1].copy()


@pytest.mark.parametrize("cls", [KerasMaker, OwnMaker])
def test_a_resume_mid_epoch_runs_trainmesh_s_step_or_is_refused(cls, tmp_path, monkeypatch):
    import trainmesh.keras as tk
    from trainmesh.keras import training
    from trainmesh.supervision.preemption import Preempted

    model, x, y = program(cls)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)  # Keras' own, never stopped
    expected = model.get_weights()
    monkeypatch.chdir(tmp_path)

    def run_the_script(callbacks):
        monkeypatch.setattr(training, "_FIT_CALLS", itertools.count(1))  # the script's first fit, each run
        model, x, y = program(cls)
        return model, lambda: tk.fit(model, x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)

    _, first = run_the_script([Stop()])
    with pytest.raises(Preempted):
        first()
    model, again = run_the_script([])
    if cls is OwnMaker:
        before = model.get_weights()
        with pytest.raises(ValueError, match=r"after 2 batches of epoch 2.*OwnMaker.make_train_function.*delete"):
            again()
        for mine, theirs in zip(model.get_weights(), before, strict=True):
            np.testing.assert_array_equal(mine, theirs)
        return
    resumed = again()
    assert resumed.history == history.history
    for mine, theirs in zip(model.get_weights(), expected, strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_fit_resumes_only_its_own_program_s_preemption_state(tmp_path, monkeypatch, caplog):
    import trainmesh.keras as tk
    from trainmesh.keras import training
    from trainmesh.supervision.preemption import Preempted

    def keras_own(lr):
        model, x, y = program(keras.Model, lr)
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)
        return model.get_weights()

    expected = {lr: keras_own(lr) for lr in (0.01, 0.05)}
    monkeypatch.chdir(tmp_path)

    def run_the_script(name, lr, callbacks=()):
        monkeypatch.setattr("sys.argv", [str(tmp_path / name), f"--lr={lr}"])
        monkeypatch.setattr(training, "_FIT_CALLS", itertools.count(1))  # the script's first fit, each run
        model, x, y = program(keras.Model, lr)
        tk.fit(model, x, y, batch_size=16, epochs=2, verbose=0, callbacks=list(callbacks))
        return model.get_weights()

    with pytest.raises(Preempted):
        run_the_script("a.py", 0.01, [Stop()])
    (state,) = (tmp_path / "trainmesh_keras").glob("fit-*/last-preempted-*.ckpt")
    with caplog.at_level(logging.INFO):
        weights = run_the_script("b.py", 0.05)  # another script, fresh: A's state is no reason to resume
    # B's own file (its name the hash of B's program) does not exist: A's state is not even read
    assert "resuming from" not in caplog.text and "preempted" not in caplog.text
    for mine, theirs in zip(weights, expected[0.05], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert state.exists()  # left for A
    weights = run_the_script("a.py", 0.01)  # A run again resumes its own state and ends as never stopped
    for mine, theirs in zip(weights, expected[0.01], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert not state.exists()
