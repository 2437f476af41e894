"""The user's Keras callbacks in each process: all of them on rank 0; elsewhere, none that writes.

Every callback runs as in Keras, in every process, and reads the same epoch logs (the metrics
summed over all processes, see sync.py), so EarlyStopping, ReduceLROnPlateau,
LearningRateScheduler and TerminateOnNaN decide alike everywhere. The callbacks whose only job
is to write (ModelCheckpoint, OrbaxCheckpoint, CSVLogger, TensorBoard, RemoteMonitor, a
ProgbarLogger) run on rank 0 only. BackupAndRestore restores in every process (they read rank 0's
backup, and rank 0's variables are broadcast after it) but saves, and deletes its backup at the
end, on rank 0 only.
"""

from __future__ import annotations

from typing import Any

from trainmesh.keras.backend import require_keras


def as_list(callbacks: Any) -> list[Any]:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


def checkpoint_writers() -> tuple[type, ...]:
    """The built-in callbacks that save the model (with its optimizer) during fit.

    OrbaxCheckpoint (not a ModelCheckpoint subclass) is missing from older Keras 3 releases: looked
    up by name, so that those run without it."""
    callbacks = require_keras().callbacks
    orbax = getattr(callbacks, "OrbaxCheckpoint", None)
    return (callbacks.ModelCheckpoint, *([orbax] if orbax is not None else []))


def for_rank(callbacks: Any, rank: int) -> list[Any]:
    """The callbacks process ``rank`` runs."""
    given = as_list(callbacks)
    if rank == 0:
        return given
    keras = require_keras()
    writers = (
        *checkpoint_writers(),
        keras.callbacks.CSVLogger,
        keras.callbacks.TensorBoard,
        keras.callbacks.RemoteMonitor,
        keras.callbacks.ProgbarLogger,
    )
    kept = []
    for callback in given:
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            kept.append(restore_only(callback))
        elif not isinstance(callback, writers):
            kept.append(callback)
    return kept


def restore_only(backup: Any) -> Any:
    """A BackupAndRestore that restores when training begins and writes nothing."""
    keras = require_keras()

    class RestoreOnly(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_begin(self, logs: Any = None) -> None:
            backup.set_model(self.model)
            backup.on_train_begin(logs)

    return RestoreOnly()
