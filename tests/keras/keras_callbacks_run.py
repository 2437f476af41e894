"""The program of the Keras multi-process callback tests (trainmesh's ddp re-runs the script it is in).

python keras_callbacks_run.py ddp OUT   -> one launch of 2 processes (strategy="ddp"), the legs one after
                                           another; every rank writes OUT/<leg>.rank{R}
python keras_callbacks_run.py node OUT  -> under torchrun (one process per node): the classifier
                                           fitted with devices=1, num_nodes=2; writes OUT/node.rank{R}

The model is keras_run.py's class_weight classifier without class_weight (small: the legs are quick),
at BATCH per process; the "custom_step" leg fits keras_custom_steps.py's CustomModel (a train_step and
test_step of its own returning {m.name: m.result() ...} and a plain tensor) instead, the "overrides" leg
its Penalized model (compute_loss and compute_metrics of its own), and a zero1 leg runs BackupAndRestore
and ModelCheckpoint interrupted and resumed. The test compares
each leg with Keras' own model.fit at 2 x BATCH in one process.
"""

import contextlib
import faulthandler
import io
import os
import shutil
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras_custom_steps  # noqa: E402
import keras_run  # noqa: E402

BATCH = keras_run.BATCH
NAN_BATCH = 2  # TerminateOnNaN leg: rank 1's sample of this global batch is NaN (rank 0's data is clean)
INTERRUPT_EPOCH = 2  # BackupAndRestore leg: every rank raises when this epoch begins


class Interrupted(RuntimeError):
    pass


def callbacks(leg: str, folder: str) -> list:
    """The Keras callbacks of each leg (one process builds the same ones)."""
    import keras

    if leg == "plateau":  # verbose=1: each prints its decisions (on rank 0 only, as one process prints them once)
        return [
            keras.callbacks.EarlyStopping(
                monitor="val_accuracy", patience=2, mode="max", restore_best_weights=True, verbose=1
            ),
            keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_delta=0.04, verbose=1),
        ]
    if leg == "scheduler":
        return [keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.05 * 0.5**epoch, verbose=1)]
    if leg == "nan":
        return [keras.callbacks.TerminateOnNaN()]
    if leg == "custom_step":  # on the step's own metrics: a tracker of its own, and the loss tracker
        return [
            keras.callbacks.ReduceLROnPlateau(monitor="abs_error", mode="min", factor=0.5, patience=1, min_delta=0.05),
            keras.callbacks.EarlyStopping(monitor="loss", patience=2, min_delta=0.03),
        ]
    if leg in ("backup", "resumed"):
        return [keras.callbacks.BackupAndRestore(os.path.join(folder, "backup"))]
    if leg in ("zero1_backup", "zero1_resumed"):  # every saver of Keras that writes the optimizer during fit
        return [
            keras.callbacks.BackupAndRestore(os.path.join(folder, "zero1_backup")),
            keras.callbacks.ModelCheckpoint(os.path.join(folder, "epoch{epoch}.keras")),
            keras.callbacks.ModelCheckpoint(
                os.path.join(folder, "batches.weights.h5"), save_weights_only=True, save_freq=3
            ),
        ]
    return []


LEGS = {"plateau": 20, "scheduler": 3, "nan": 2, "uninterrupted": 4, "custom_step": 12, "overrides": 2}  # epochs


def fit_arguments(leg: str, batch: int, folder: str = "") -> tuple:
    if leg == "custom_step":
        model, x, y = keras_custom_steps.custom_step()
    elif leg == "overrides":  # compute_loss and compute_metrics of its own
        model, (x, y) = keras_custom_steps.penalized(), keras_run.get_tabular()
    else:
        model = keras_run.build("classifier", "sgd")
        x, y = keras_run.get_tabular()
    if leg == "nan":  # a sample of global batch NAN_BATCH (at 2 x BATCH), rank 1's under 2 processes: a NaN loss
        import keras

        # torch's binary cross-entropy raises on NaN probabilities; the squared error lets the NaN through
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["accuracy"])
        x = x.copy()
        x[NAN_BATCH * 2 * BATCH + 1, 0] = np.nan
    epochs = LEGS.get(leg, LEGS["uninterrupted"])
    arguments = {"batch_size": batch, "epochs": epochs, "shuffle": False, "validation_split": 0.2}
    return model, x, y, {**arguments, "callbacks": callbacks(leg, folder)}


def record(model, history, losses: list) -> dict:
    return {
        "variables": keras_run.variables(model),
        "history": history.history if history is not None else None,
        "learning_rate": float(model.optimizer.learning_rate.numpy()),
        "iterations": int(model.optimizer.iterations.numpy()),
        "batch_losses": losses,
    }


def fit_leg(leg: str, folder: str, **launch) -> dict:
    """The leg's tk.fit in this process: what record() keeps, and the lines Keras printed (fit's verbose=0:
    the callbacks' own)."""
    import keras
    import trainmesh.keras as tk

    model, x, y, arguments = fit_arguments(leg, BATCH, folder)
    losses: list = []
    arguments["callbacks"].append(
        keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(logs["loss"]))
    )
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        history = tk.fit(model, x, y, verbose=0, **launch, **arguments)
    if leg == "overrides":  # its test_step's compute_loss and compute_metrics too, over all of x
        evaluated = tk.evaluate(model, x, y, batch_size=BATCH, verbose=0, return_dict=True, **launch)
        return {**record(model, history, losses), "evaluate": evaluated, "stdout": printed.getvalue()}
    return {**record(model, history, losses), "stdout": printed.getvalue()}


def interrupted_then_resumed(folder: str, strategy: str | None = "ddp", batch: int = BATCH) -> dict:
    """Keras' own BackupAndRestore test, distributed: a fit that raises at INTERRUPT_EPOCH on every rank,
    then the same fit again with a new BackupAndRestore on the same folder. ``strategy="zero1"``: with the
    ModelCheckpoints too, rank 0's backup kept as interrupted.weights.h5; None: Keras' own fit, one process."""
    import keras
    import trainmesh.keras as tk

    legs = ("zero1_backup", "zero1_resumed") if strategy != "ddp" else ("backup", "resumed")
    model, x, y, arguments = fit_arguments(legs[0], batch, folder)

    def fit(arguments):
        if strategy is None:
            return model.fit(x, y, verbose=0, **arguments)
        return tk.fit(model, x, y, verbose=0, strategy=strategy, devices=2, **arguments)

    def interrupt(epoch, logs):
        if epoch == INTERRUPT_EPOCH:
            raise Interrupted(f"interrupted at epoch {epoch}")

    arguments["callbacks"].append(keras.callbacks.LambdaCallback(on_epoch_begin=interrupt))
    try:
        fit(arguments)
        raise AssertionError("the interrupting callback did not stop the fit")
    except Interrupted:
        pass
    backup = os.path.join(folder, legs[0])  # the BackupAndRestore folder is named after the leg
    left = sorted(os.listdir(backup)) if os.path.isdir(backup) else []
    if strategy != "ddp" and left:
        shutil.copy(os.path.join(backup, "latest.weights.h5"), os.path.join(folder, "interrupted.weights.h5"))
    _, _, _, arguments = fit_arguments(legs[1], batch, folder)  # a new model would do too: the backup restores
    history = fit(arguments)
    return {**record(model, history, []), "backup_files": left, "after": sorted(os.listdir(folder))}


def run_ddp(out: str) -> None:
    import trainmesh.keras as tk

    rank = int(os.environ.get("RANK", "0"))
    folder = os.path.join(out, f"files.rank{rank}")  # each rank's own: only rank 0's may get files
    os.makedirs(folder, exist_ok=True)
    for leg in LEGS:
        result = fit_leg(leg, folder, strategy="ddp", devices=2)
        torch.save(result, os.path.join(out, f"{leg}.rank{rank}"))
    torch.save(interrupted_then_resumed(folder), os.path.join(out, f"backup.rank{rank}"))
    zero1_folder = os.path.join(out, f"zero1.rank{rank}")
    os.makedirs(zero1_folder)
    try:
        zero1 = interrupted_then_resumed(zero1_folder, strategy="zero1")
    except ValueError as error:  # a refusal, the same on both ranks: the other legs' tests still run
        zero1 = {"error": str(error)}
    torch.save(zero1, os.path.join(out, f"zero1_backup.rank{rank}"))
    model, x, y, _ = fit_arguments("scheduler", BATCH)
    evaluated = tk.evaluate(model, x, y, batch_size=BATCH, verbose=0, return_dict=True, strategy="ddp", devices=2)
    predicted = tk.predict(model, x, batch_size=BATCH, verbose=0, strategy="ddp", devices=2)
    torch.save(
        {"variables": keras_run.variables(model), "evaluate": evaluated, "predict": np.asarray(predicted)},
        os.path.join(out, f"inference.rank{rank}"),
    )


def run_node(out: str) -> None:
    rank = int(os.environ["RANK"])
    result = fit_leg("uninterrupted", out, strategy="ddp", devices=1, num_nodes=2)
    torch.save(result, os.path.join(out, f"node.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp, "node": run_node}[sys.argv[1]](*sys.argv[2:])
