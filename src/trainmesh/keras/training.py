"""``fit``, ``evaluate`` and ``predict`` for Keras models, each a Trainer run of a KerasModule.

Every strategy, callback, logger, checkpoint and exact resume of the Trainer applies. Under a
multi-process strategy (``strategy="ddp", devices=N``) the script runs again once per process,
as with the Trainer: put the calls under ``if __name__ == "__main__":`` or accept that each
process runs the whole script; every process returns the same History (epoch metrics are
reduced over all processes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainmesh.callbacks.base import Callback
from trainmesh.keras.adapter import KerasModule
from trainmesh.keras.backend import is_keras_object
from trainmesh.keras.inputs import to_loader, validation_loader
from trainmesh.seed import seed_everything
from trainmesh.trainer.trainer import Trainer
from trainmesh.trainer_view import TrainerView

# Keras' fit writes no files and runs no sanity check: these Trainer defaults follow it, and
# any of them can be set back through the keyword arguments (logger=True, enable_checkpointing=True...).
_KERAS_LIKE_DEFAULTS = {
    "logger": False,
    "enable_checkpointing": False,
    "num_sanity_val_steps": 0,
    "enable_model_summary": False,
}


class History:
    """What Keras' ``fit`` returns: ``history`` maps each metric ("loss", "accuracy",
    "val_loss", ...) to its per-epoch values, ``epoch`` lists the epochs run."""

    def __init__(
        self,
        history: dict[str, list[float]] | None = None,
        epoch: list[int] | None = None,
        params: dict[str, Any] | None = None,
        model: Any = None,
    ) -> None:
        self.history: dict[str, list[float]] = history or {}
        self.epoch: list[int] = epoch or []
        self.params: dict[str, Any] = params or {}
        self.model = model

    def __repr__(self) -> str:
        return f"History(epochs={len(self.epoch)}, metrics={sorted(self.history)})"


class HistoryCallback(Callback):
    """Records the epoch metrics into a History; its state travels in checkpoints (a resumed
    run's History holds the epochs before the stop) and back from ddp_spawn workers."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        metrics = trainer.epoch_metrics
        self.epoch.append(trainer.current_epoch)
        for name in self.names:
            if name in metrics:
                self.history.setdefault(name, []).append(float(metrics[name]))

    def state_dict(self) -> dict[str, Any]:
        return {"history": {k: list(v) for k, v in self.history.items()}, "epoch": list(self.epoch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = {k: list(v) for k, v in state_dict.get("history", {}).items()}
        self.epoch = list(state_dict.get("epoch", []))


def as_module(model: Any) -> KerasModule:
    """A KerasModule as given, or one around a Keras model."""
    if isinstance(model, KerasModule):
        return model
    return KerasModule(model)


def _trainer(*, callbacks: Any, verbose: bool, **kwargs: Any) -> Trainer:
    given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    keras_callbacks = [type(cb).__name__ for cb in given if is_keras_object(cb)]
    if keras_callbacks:
        raise TypeError(
            f"callbacks {keras_callbacks} are Keras callbacks; trainmesh.keras runs trainmesh callbacks "
            "(trainmesh.callbacks.EarlyStopping, ModelCheckpoint, or a trainmesh.Callback subclass)"
        )
    settings = {**_KERAS_LIKE_DEFAULTS, "enable_progress_bar": verbose, **kwargs}
    return Trainer(callbacks=given, **settings)


def fit(
    model: Any,
    x: Any = None,
    y: Any = None,
    *,
    batch_size: int = 32,
    epochs: int = 1,
    validation_data: Any = None,
    shuffle: bool = True,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    precision: str | int = "32-true",
    callbacks: Any = None,
    seed: int | None = 0,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> History:
    """Train a compiled Keras model (or a :class:`KerasModule`) as Keras' ``model.fit`` does.

    ``batch_size`` is the per-process batch, as in the keras-io guide's DistributedSampler loop:
    with ``strategy="ddp", devices=N`` each step reads ``N * batch_size`` samples in all.
    TensorFlow's ``MirroredStrategy`` takes the global batch instead: its ``batch_size=B`` on N
    devices is ``batch_size=B // N`` here. ``x``/``y``: NumPy arrays, or ``x`` a torch Dataset,
    DataLoader or ``keras.utils.PyDataset`` (:mod:`trainmesh.keras.inputs`). ``seed``: passed to
    :func:`trainmesh.seed_everything` first (shuffling, torch's RNG), None to leave the RNGs as they are.
    ``trainer_kwargs`` go to the Trainer (``max_steps``, ``accumulate_grad_batches``,
    ``gradient_clip_val``, ``logger=True``, ``enable_checkpointing=True``, ``default_root_dir``...),
    except ``ckpt_path``, which resumes a run as ``Trainer.fit(ckpt_path=...)`` does.

    Returns a :class:`History`, in every process.
    """
    module = as_module(model)
    module.check_loss()
    module.configure_optimizers()  # a Keras optimizer that cannot be mapped fails here, before any process starts
    if seed is not None:
        seed_everything(seed)
    train_loader = to_loader(x, y, batch_size=batch_size, shuffle=shuffle)
    val_loader = validation_loader(validation_data, batch_size=batch_size)
    ckpt_path = trainer_kwargs.pop("ckpt_path", None)
    recorder = HistoryCallback(module.history_names())
    extra = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    trainer = _trainer(
        callbacks=[*extra, recorder],
        verbose=verbose,
        max_epochs=epochs,
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        precision=precision,
        **trainer_kwargs,
    )
    trainer.fit(module, train_loader, val_loader, ckpt_path=ckpt_path)
    params = {
        "epochs": epochs,
        "steps": len(train_loader) if hasattr(train_loader, "__len__") else None,
        "batch_size": batch_size,
    }
    return History(recorder.history, recorder.epoch, params, module.model)


def evaluate(
    model: Any,
    x: Any = None,
    y: Any = None,
    *,
    batch_size: int = 32,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    precision: str | int = "32-true",
    callbacks: Any = None,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> dict[str, float]:
    """The loss and metrics over ``x``/``y`` (every sample once, across processes), as Keras'
    ``model.evaluate(..., return_dict=True)``: ``{"loss": ..., "accuracy": ...}``.
    ``batch_size`` is per process; the data forms are :func:`fit`'s."""
    module = as_module(model)
    module.check_loss()
    loader = to_loader(x, y, batch_size=batch_size, shuffle=False)
    trainer = _trainer(
        callbacks=callbacks,
        verbose=verbose,
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        precision=precision,
        **trainer_kwargs,
    )
    results = trainer.test(module, loader, verbose=verbose)
    logged = results[0] if results else {}
    return {name[len("test_") :] if name.startswith("test_") else name: float(value) for name, value in logged.items()}


def predict(
    model: Any,
    x: Any,
    *,
    batch_size: int = 32,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    precision: str | int = "32-true",
    callbacks: Any = None,
    verbose: bool = True,
    **trainer_kwargs: Any,
) -> Any:
    """The model's outputs (``training=False``) for every sample of ``x``, in order, as one NumPy
    array (a list or dict of arrays for a model with several outputs), in every process."""
    module = as_module(model)
    loader = to_loader(x, None, batch_size=batch_size, shuffle=False)
    trainer = _trainer(
        callbacks=callbacks,
        verbose=verbose,
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        precision=precision,
        **trainer_kwargs,
    )
    outputs = trainer.predict(module, loader)
    return concatenate(outputs)


def concatenate(batches: list[Any]) -> Any:
    """Per-batch outputs joined along the batch axis, as NumPy."""
    if not batches:
        return np.empty((0,))
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([b.detach().cpu() for b in batches]).numpy()
    if isinstance(first, dict):
        return {key: concatenate([b[key] for b in batches]) for key in first}
    if isinstance(first, (list, tuple)):
        return [concatenate([b[i] for b in batches]) for i in range(len(first))]
    return np.concatenate([np.asarray(b) for b in batches])
