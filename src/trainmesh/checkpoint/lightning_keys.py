"""The entries of a checkpoint that Lightning 2.6 names its own way, so that programs (and Lightning
itself) read a trainmesh checkpoint as they read Lightning's.

Lightning writes the precision plugin's state under the plugin's class name
(``checkpoint[type(plugin).__qualname__]``, ``checkpoint_connector.dump_checkpoint``), and only
when it is not empty: the loss scaler's ``state_dict()`` of a ``MixedPrecision("16-mixed")``.
trainmesh before this wrote ``checkpoint["precision"] = {"scaler": ...}``; those checkpoints still load.
"""

from __future__ import annotations

from typing import Any

from trainmesh.version import LIGHTNING_API_VERSION

VERSION_KEY = "pytorch-lightning_version"
# Lightning's 16-mixed plugin (torch.amp.GradScaler); the class whose name keys its scaler state
SCALER_PLUGIN_KEY = "MixedPrecision"
# Where trainmesh checkpoints written before the Lightning key kept the scaler: {"scaler": state}
_OLD_PRECISION_KEY = "precision"
# Lightning 1.x's key for the scaler state (its migration renames it to the plugin's name)
_LIGHTNING1_SCALER_KEY = "native_amp_scaling_state"


def version_entry() -> dict[str, str]:
    return {VERSION_KEY: LIGHTNING_API_VERSION}


def precision_entries(precision_state: dict[str, Any]) -> dict[str, Any]:
    """``precision_state`` (``Precision.state_dict()``) as Lightning's entry: none without a scaler."""
    scaler = precision_state.get("scaler")
    return {SCALER_PLUGIN_KEY: scaler} if scaler else {}


def saved_precision_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The ``Precision.load_state_dict`` argument from a checkpoint of either layout ({} if none)."""
    for key in (SCALER_PLUGIN_KEY, _LIGHTNING1_SCALER_KEY):
        if checkpoint.get(key):
            return {"scaler": checkpoint[key]}
    old = checkpoint.get(_OLD_PRECISION_KEY)
    return old if isinstance(old, dict) else {}


def _progress(ready: int, completed: int, *, started: int | None = None, processed: int = 0) -> dict[str, int]:
    """Lightning's progress counters (``_ReadyCompletedTracker``; with ``started``, ``_ProcessedTracker``)."""
    counts = {"ready": ready, "completed": completed}
    if started is not None:
        counts |= {"started": started, "processed": processed}
    return counts


def _ready_completed(progress: dict[str, Any] | None) -> dict[str, Any] | None:
    """Lightning's ``_Progress`` of ``_ReadyCompletedTracker`` (its scheduler_progress) from full counts."""
    if progress is None:
        return None
    return {key: _progress(progress[key]["ready"], progress[key]["completed"]) for key in ("total", "current")}


def _batch_progress(current: int, total: int, *, last: bool | None) -> dict[str, Any]:
    progress = {
        "total": _progress(total, total, started=total, processed=total),
        "current": _progress(current, current, started=current, processed=current),
    }
    return progress if last is None else progress | {"is_last_batch": last}


def _optimizer_progress(
    optimizer: dict[str, Any] | None, loop: dict[str, Any], global_step: int
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Lightning's optimizer ``step`` and ``zero_grad`` progress and its ``_batches_that_stepped``: from
    the Trainer's counts (``optimizer``: the epoch's steps, the zero_grad calls, the batches stepped, as
    Lightning's loop counts them at the save), else from the position (a checkpoint's ``loop`` entry)."""
    if optimizer is None:
        done = loop["batches_done"]
        steps = {"total": _progress(global_step, global_step), "current": _progress(done, done)}
        zero_grads = {key: value | {"started": value["ready"]} for key, value in steps.items()}
        return steps, zero_grads, loop.get("batches_stepped", global_step)
    total, current = optimizer["step"]["total"], optimizer["step"]["current"]
    # ready ahead of completed: a step begun (an exception in its closure), or as a resumed fit restored it
    ahead_total, ahead_current = optimizer["step"].get("ahead", (0, 0))
    steps = {"total": _progress(total + ahead_total, total), "current": _progress(current + ahead_current, current)}
    zero_grads = {
        key: {"ready": counts["ready"], "completed": counts["completed"], "started": counts["started"]}
        for key, counts in optimizer["zero_grad"].items()
    }
    return steps, zero_grads, optimizer["batches_stepped"]


def _manual_steps(steps: dict[str, Any]) -> dict[str, Any]:
    return {"total": steps["total"], "current": dict(steps["total"])}


def lightning_loops(
    loop: dict[str, Any],
    epoch: int,
    global_step: int,
    *,
    automatic: bool,
    counters: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Lightning's ``loops`` entry (its loops' progress counters) for the position trainmesh's ``loop``
    entry records, so that Lightning's ``fit(ckpt_path=)`` resumes where trainmesh stopped: without it
    Lightning restarts at epoch 0 with the checkpoint's weights and trains every epoch again.

    Lightning's ``current_epoch`` is the epochs completed; at an epoch's end (ModelCheckpoint's
    save in ``on_train_epoch_end``) the epoch is processed but not yet completed, which makes
    Lightning resume with the next epoch; the batches of the epoch are the current batch counts.
    ``counters``: the evaluation loops' batch progress as the Trainer counted it (``val_loop``, the
    fit's validation; ``validate_loop``, ``test_loop``, ``predict_loop``), Lightning's ``_BatchProgress`` state dicts.
    """
    counters = counters or {}
    done, finished = loop["batches_done"], loop["epoch_finished"]
    started = epoch + 1 if finished or done else epoch
    # taken in the validation after the epoch's last batch: the epoch is not processed yet (its end is due)
    processed = epoch + 1 if finished and not loop.get("epoch_end_due") else epoch
    if "stopped_epoch" in loop:  # max_steps ended that epoch inside: Lightning counted it processed
        # (in its on_train_epoch_end, then completed: ``epoch`` is the trainer's current_epoch) and keeps
        # the epoch's batch counts, not at its last batch
        started = processed = loop["stopped_epoch"] + 1
    epochs = {"total": _progress(started, epoch, started=started, processed=processed)}
    epochs["current"] = dict(epochs["total"])
    optimizer = counters.get("optimizer")
    steps, zero_grads, stepped = _optimizer_progress(optimizer, loop, global_step)
    none = {"total": _progress(0, 0), "current": _progress(0, 0)}
    batches = counters.get("train_batches") or _batch_progress(done, loop.get("total_batches", 0), last=finished)
    fit_loop = {
        "state_dict": {},
        "epoch_loop.state_dict": {"_batches_that_stepped": stepped},
        "epoch_loop.batch_progress": batches,
        "epoch_loop.scheduler_progress": _ready_completed(counters.get("scheduler_progress")) or none,
        "epoch_loop.automatic_optimization.state_dict": {},
        "epoch_loop.automatic_optimization.optim_progress": {
            "optimizer": {"step": steps, "zero_grad": zero_grads}
            if automatic
            else {"step": none, "zero_grad": {key: value | {"started": 0} for key, value in none.items()}}
        },
        "epoch_loop.manual_optimization.state_dict": {},
        # manual optimization's steps: Lightning never resets its current count (both are global_step)
        "epoch_loop.manual_optimization.optim_step_progress": none if automatic else _manual_steps(steps),
        "epoch_loop.val_loop.state_dict": {},
        "epoch_loop.val_loop.batch_progress": counters.get("val_loop", _batch_progress(0, 0, last=False)),
        "epoch_progress": epochs,
    }
    validate, test = (
        {"state_dict": {}, "batch_progress": counters.get(name, _batch_progress(0, 0, last=False))}
        for name in ("validate_loop", "test_loop")
    )
    predicted = counters.get("predict_loop", _batch_progress(0, 0, last=None))
    # Lightning's predict loop keeps a _Progress: no is_last_batch in its state
    predict = {"state_dict": {}, "batch_progress": {k: v for k, v in predicted.items() if k != "is_last_batch"}}
    return {"fit_loop": fit_loop, "validate_loop": validate, "test_loop": test, "predict_loop": predict}


def written_by_lightning(checkpoint: Any) -> bool:
    """A checkpoint Lightning wrote (its version key and weights, none of trainmesh's entries): its
    weights, data module and callback states load as Lightning loads them for validate/test/predict."""
    return (
        isinstance(checkpoint, dict)
        and VERSION_KEY in checkpoint
        and "state_dict" in checkpoint
        and "trainmesh_version" not in checkpoint
    )
