"""``GradientAccumulationScheduler``, as Lightning 2.6 defines it (its
``callbacks/gradient_accumulation_scheduler.py``): at each training epoch's start it sets
``trainer.accumulate_grad_batches`` to the factor ``scheduling`` gives for that epoch (epochs are
counted from 0; before the first key, 1). The fit loop reads the factor when the epoch's batches
start (after ``on_train_epoch_start``), as Lightning's reads it at each batch.

>>> scheduler = GradientAccumulationScheduler(scheduling={0: 1, 2: 4})  # 4 batches a step from epoch 2
>>> [scheduler.get_accumulate_grad_batches(epoch) for epoch in range(4)]
[1, 1, 4, 4]
"""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.model_helpers import is_overridden
from trainmesh.utilities.rank_zero import rank_zero_warn


class GradientAccumulationScheduler(Callback):
    """Change the number of batches whose gradients are accumulated per optimizer step, by epoch.

    At each training epoch's start ``trainer.accumulate_grad_batches`` is set to the factor of the
    largest scheduled epoch not after it. Refused: manual optimization (``RuntimeError``), and a
    ``Trainer(accumulate_grad_batches=...)`` other than 1 beside it (``ValueError``).

    Args:
        scheduling: ``{epoch: factor}``, epochs counted from 0 (ints >= 0), factors ints >= 1; an empty dict raises ``TypeError``; without key 0, epochs before the first key use 1 (``{0: 1}`` is added to the dict given).

    Examples:
        >>> scheduler = GradientAccumulationScheduler(scheduling={4: 2, 8: 4})
        >>> [scheduler.get_accumulate_grad_batches(epoch) for epoch in (0, 4, 7, 8, 20)]
        [1, 2, 2, 4, 4]
        >>> # Trainer(callbacks=[scheduler])
    """

    # The one a Trainer of a pytorch-lightning 1.x run makes of its own accumulate_grad_batches, as 1.9.5's
    # (trainer/lightning1/accumulation.py): 1.9.5's callback refuses nothing at on_train_start
    _made_by_trainer = False

    def __init__(self, scheduling: dict[int, int]) -> None:
        super().__init__()
        if not scheduling:
            raise TypeError("Empty dict cannot be interpreted correct")
        if any(not isinstance(key, int) or key < 0 for key in scheduling):
            raise MisconfiguredValue(
                f"Epoch should be an int greater than or equal to 0. Got {list(scheduling.keys())}."
            )
        if any(not isinstance(value, int) or value < 1 for value in scheduling.values()):
            raise MisconfiguredValue(
                f"Accumulation factor should be an int greater than 0. Got {list(scheduling.values())}."
            )
        if min(scheduling) != 0:  # the first epochs step every batch
            scheduling.update({0: 1})
        self.scheduling = scheduling
        self.epochs = sorted(scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(value > 1 for value in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        for scheduled in reversed(self.epochs):
            if epoch >= scheduled:
                return self.scheduling[scheduled]
        return 1

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        """Refuses what Lightning refuses: manual optimization, and a Trainer's own accumulation."""
        if not pl_module.automatic_optimization and not self._made_by_trainer:
            raise RuntimeError(
                "Automatic gradient accumulation and the `GradientAccumulationScheduler` is not supported for "
                "manual optimization. Please remove the callback or switch to automatic optimization."
            )
        overridden = is_overridden("optimizer_step", pl_module) or is_overridden("optimizer_zero_grad", pl_module)
        if overridden and self.going_to_accumulate_grad_batches():
            rank_zero_warn(
                "When using `Trainer(accumulate_grad_batches != 1)` and overriding"
                " `LightningModule.optimizer_{step,zero_grad}`, the hooks will not be called on every batch"
                " (rather, they are called on every optimization step)."
            )
        if trainer.accumulate_grad_batches != 1 and not self._made_by_trainer:
            raise ValueError(
                "You have set `accumulate_grad_batches` and are using the `GradientAccumulationScheduler`"
                " callback. Either remove `accumulate_grad_batches` from the Trainer or remove the callback."
            )

    def on_train_epoch_start(self, trainer: TrainerView, *_: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)
