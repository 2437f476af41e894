"""pytorch-lightning 1.9.5's ``GradientAccumulationScheduler`` in every Trainer of a 1.x run (its
``_CallbackConnector._configure_accumulated_gradients``): the one a program gave, else one the Trainer
makes of ``accumulate_grad_batches`` (an int ``n``: ``{0: n}``; 1.x's dict as given), listed after the
program's callbacks, the bar and the summary, before the checkpoint callbacks; ``trainer.accumulate_grad_batches``
reads its factor for epoch 0. 1.9.5's fit loop applies that scheduler at each epoch's start before
the callbacks' ``on_train_epoch_start`` (:func:`apply_epoch_factor`). A 2.x run lists none (Lightning 2.x's)."""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.checkpoint import Checkpoint
from trainmesh.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler


def listed_scheduler(callbacks: list[Any]) -> GradientAccumulationScheduler | None:
    """The first ``GradientAccumulationScheduler`` among ``callbacks`` (1.9.5's ``trainer.accumulation_scheduler``)."""
    return next((cb for cb in callbacks if isinstance(cb, GradientAccumulationScheduler)), None)


def with_accumulation_scheduler(callbacks: list[Any], factor: int | dict[int, int]) -> list[Any]:
    """``callbacks`` as 1.9.5 lists them: unchanged where one is listed, else with one the Trainer makes of
    ``factor`` before the checkpoint callbacks (1.9.5 appends it, then moves checkpoints last)."""
    if listed_scheduler(callbacks) is not None:
        return callbacks
    made = GradientAccumulationScheduler(dict(factor) if isinstance(factor, dict) else {0: factor})
    made._made_by_trainer = True  # the Trainer's own: its factor is the Trainer's argument (not a second one)
    # (the list is in Lightning's order already: finders first, checkpoint callbacks last)
    place = next((i for i, cb in enumerate(callbacks) if isinstance(cb, Checkpoint)), len(callbacks))
    return [*callbacks[:place], made, *callbacks[place:]]


def apply_epoch_factor(view: Any, module: Any) -> None:
    """1.9.5's fit loop at an epoch's start: ``trainer.accumulation_scheduler.on_train_epoch_start`` before
    the callbacks' hooks (so they read this epoch's factor)."""
    scheduler = listed_scheduler(view.callbacks)
    if scheduler is not None:
        scheduler.on_train_epoch_start(view, module)
