"""KerasModule: a Keras 3 model (torch backend) as a trainmesh Module.

A Keras model on the torch backend is a ``torch.nn.Module`` whose every variable is an
``nn.Parameter``: trainable weights, BatchNormalization's moving mean and variance
(``requires_grad=False``) and each dropout layer's SeedGenerator state (an integer tensor).
Keras layers follow the ``training=`` argument, not ``train()``/``eval()``, so every step passes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainmesh.keras.backend import is_keras_object, require_keras
from trainmesh.keras.mapping import LossFn, torch_loss, torch_metric
from trainmesh.keras.optimizers import torch_optimizer_factory
from trainmesh.module import Module


class KerasModule(Module):
    """Train, evaluate and predict with a Keras model through the Trainer.

    ``loss``, ``metrics`` and ``optimizer`` default to what ``model.compile`` was given. A loss or
    metric may be a Keras name ("sparse_categorical_crossentropy", "accuracy", "mae"...), a
    ``keras.losses``/``keras.metrics`` object or a function ``(y_true, y_pred)``; the known ones
    run as torch functions with Keras' values (:mod:`trainmesh.keras.mapping`). ``optimizer``
    may be a Keras optimizer (mapped to torch's, :mod:`trainmesh.keras.optimizers`), a torch
    optimizer class or a factory called with the trainable parameters (returning an optimizer
    or anything ``configure_optimizers`` may return).

    Steps log under Keras' names: "loss" and each metric ("accuracy") in training,
    "val_loss"/"val_accuracy" in validation, "test_loss"/"test_accuracy" in test; epoch values
    are means over every sample of every process. Subclass it to write your own steps.

    Under several processes (ddp, zero1, ddp2) the BatchNormalization moving statistics are
    broadcast from rank 0 at every optimizer step (:meth:`sync_moving_statistics`). Dropout: an
    unseeded Keras ``Dropout`` (keras 3.15, torch backend) draws its mask from torch's global
    generator, not from its SeedGenerator state (which never advances), so the masks are
    reproducible and the same on every rank when every rank is seeded alike (``fit(seed=0)``
    does, as the keras-io guide's DDP loop does by seeding every process the same).

    >>> # module = KerasModule(model)  # a compiled model
    >>> # tm.Trainer(strategy="ddp", devices=2, max_epochs=3).fit(module, loader)
    """

    def __init__(
        self, model: Any, *, loss: Any = None, metrics: Sequence[Any] | None = None, optimizer: Any = None
    ) -> None:
        keras = require_keras()
        if not isinstance(model, keras.Layer) or not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"KerasModule wraps a Keras model (keras.Model, keras.Sequential), got {type(model).__name__}"
            )
        super().__init__()
        self.model = model
        compiled = bool(getattr(model, "compiled", False))
        self._loss_spec = loss if loss is not None else (model.loss if compiled else None)
        if metrics is None and compiled:
            metrics = list(getattr(getattr(model, "_compile_metrics", None), "_user_metrics", None) or [])
        if metrics is not None and not isinstance(metrics, (list, tuple)):
            raise TypeError(f"metrics must be a list (Keras' flat form), got {type(metrics).__name__}")
        self.metric_fns: list[tuple[str, LossFn]] = [torch_metric(m) for m in metrics or []]
        self.loss_fn: LossFn | None = None if self._loss_spec is None else torch_loss(self._loss_spec)
        self._optimizer_spec = (
            optimizer if optimizer is not None else (getattr(model, "optimizer", None) if compiled else None)
        )
        self._synced_step = -1

    # ---- what the steps compute ----------------------------------------------------------------
    def forward(self, x: Any, training: bool = False) -> Any:
        return self.model(x, training=training)

    def check_loss(self) -> LossFn:
        """The loss function, or the error saying how to give one."""
        if self.loss_fn is None:
            raise ValueError(
                f"{type(self.model).__name__} has no loss: it was not compiled with one and no loss= was given. "
                "Call model.compile(optimizer='adam', loss='sparse_categorical_crossentropy') first, or pass "
                "KerasModule(model, loss=...) (a Keras loss name or object, or a function (y_true, y_pred))"
            )
        return self.loss_fn

    def compute_loss(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """The loss, plus the model's regularization losses (``model.losses``) as Keras adds them."""
        loss = self.check_loss()(y_true, y_pred)
        extra = list(getattr(self.model, "losses", []) or [])
        return loss + sum(extra) if extra else loss

    def _step(self, batch: Any, *, training: bool, prefix: str) -> torch.Tensor:
        x, y = unpack_batch(batch, needs_targets=True)
        y_pred = self.model(x, training=training)
        loss = self.compute_loss(y, y_pred)
        on_step = training  # training logs the step value too (the progress bar), evaluation the epoch's
        self.log(f"{prefix}loss", loss, on_step=on_step, on_epoch=True, prog_bar=True)
        with torch.no_grad():
            for name, fn in self.metric_fns:
                self.log(f"{prefix}{name}", fn(y, y_pred.detach()), on_step=on_step, on_epoch=True, prog_bar=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, training=True, prefix="")

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, training=False, prefix="val_")

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, training=False, prefix="test_")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        x, _ = unpack_batch(batch, needs_targets=False)
        return self.model(x, training=False)

    def history_names(self) -> list[str]:
        """The epoch metrics a Keras ``History`` holds: loss, metrics, then their val_ forms."""
        names = ["loss", *(name for name, _ in self.metric_fns)]
        return [*names, *(f"val_{name}" for name in names)]

    # ---- the optimizer ----------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        spec = self._optimizer_spec
        params = [p for p in self.model.parameters() if p.requires_grad]
        if spec is None:
            raise ValueError(
                f"{type(self.model).__name__} has no optimizer: compile it with one "
                "(model.compile(optimizer='adam', ...)) or pass KerasModule(model, optimizer=torch.optim.Adam)"
            )
        if isinstance(spec, torch.optim.Optimizer):
            return spec
        if is_keras_object(spec):
            return torch_optimizer_factory(spec)(params)
        if callable(spec):
            return spec(params)
        raise TypeError(
            f"optimizer={spec!r}: pass a Keras optimizer, a torch optimizer class or a factory params -> optimizer"
        )

    # ---- BatchNormalization's moving statistics across processes ---------------------------------
    def moving_statistics(self) -> list[torch.Tensor]:
        """The floating parameters no optimizer trains: BatchNormalization's moving mean and variance."""
        return [p for p in self.model.parameters() if not p.requires_grad and p.is_floating_point()]

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # The step's forward has updated the moving statistics and the optimizer never touches
        # them (no gradient), so syncing here leaves exactly the state syncing after the step
        # would; here it also comes before any validation that follows the step.
        self.sync_moving_statistics()

    def sync_moving_statistics(self) -> None:
        """Give every process rank 0's moving statistics, once per optimizer step.

        Each rank's BatchNormalization layers update their moving statistics from the rank's own
        batch, and DDP broadcasts buffers only, not parameters, which Keras' statistics are. Rank
        0 never receives anything, so its statistics are exactly those of a run that sees only
        rank 0's batches (the one-rank view), and rank 0 stays bit-identical to the keras-io
        guide's DDP loop; the other ranks then hold the same, as DDP does for torch buffers.
        """
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1 or self._synced_step == trainer.global_step:
            return
        self._synced_step = trainer.global_step
        statistics = self.moving_statistics()
        if statistics:
            trainer.runtime.broadcast_tensors(statistics, src=0)


def unpack_batch(batch: Any, *, needs_targets: bool) -> tuple[Any, Any]:
    """(inputs, targets) of a batch: ``(x, y)``, ``[x, y]``, ``(x,)`` or ``x``."""
    if isinstance(batch, (tuple, list)):
        if len(batch) == 3:
            raise ValueError(
                "a batch of (x, y, sample_weight): trainmesh.keras does not apply sample weights; "
                "give batches of (x, y), or subclass KerasModule and weigh the loss in training_step"
            )
        x, y = (batch[0], batch[1]) if len(batch) == 2 else (batch[0], None) if len(batch) == 1 else (batch, None)
    else:
        x, y = batch, None
    if needs_targets and y is None:
        raise ValueError("training and evaluation need batches of (x, y); this one holds inputs only")
    return x, y
