"""What Lightning's ``ProgressBar`` base class gives a bar written on it: ``trainer``, the stages'
descriptions, the batch totals a bar draws (``total_train_batches``, ``total_val_batches``, the
current evaluation loader's), the loader-change tracker, ``disable``/``enable`` and ``print``. A
custom bar (or a callback) ported from Lightning reads these; trainmesh's own bar shares them."""

from __future__ import annotations

from typing import Any

from trainmesh.trainer_view import TrainerView


class ProgressBarMembers:
    """Lightning 2.6's ``ProgressBar`` members, read from the Trainer the bar was set up with.

    Examples:
        >>> from trainmesh.callbacks import ProgressBar
        >>> ProgressBar().train_description, ProgressBar().is_enabled
        ('Training', True)
    """

    _trainer: TrainerView | None = None
    _current_eval_dataloader_idx: int | None = None
    _switched_off = False

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        """Keep the Trainer (Lightning's ``ProgressBar.setup``)."""
        self._trainer = trainer

    @property
    def trainer(self) -> TrainerView:
        if self._trainer is None:
            raise TypeError(f"The `{type(self).__name__}._trainer` reference has not been set yet.")
        return self._trainer

    @property
    def sanity_check_description(self) -> str:
        return "Sanity Checking"

    @property
    def train_description(self) -> str:
        return "Training"

    @property
    def validation_description(self) -> str:
        return "Validation"

    @property
    def test_description(self) -> str:
        return "Testing"

    @property
    def predict_description(self) -> str:
        return "Predicting"

    @property
    def total_train_batches(self) -> int | float:
        """The epoch's training batches (fewer where ``max_steps`` ends an unbounded fit first; inf
        for a loader without a length)."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
            return min(trainer.num_training_batches, trainer.max_steps - trainer.global_step)
        result: int | float = trainer.num_training_batches
        return result

    def _current(self, batches: list[int | float]) -> int | float:
        return batches[self._current_eval_dataloader_idx or 0]

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        trainer = self.trainer
        return self._current(trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches)

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        return self._current(self.trainer.num_test_batches)

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        return self._current(self.trainer.num_predict_batches)

    @property
    def total_val_batches(self) -> int | float:
        """The validation batches this training epoch runs: 0 in an epoch that does not validate."""
        trainer = self.trainer
        every_n = trainer.check_val_every_n_epoch
        if not trainer.enable_validation or (every_n is not None and (trainer.current_epoch + 1) % every_n):
            return 0
        result: int | float = sum(trainer.num_val_batches)
        return result

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        previous, self._current_eval_dataloader_idx = self._current_eval_dataloader_idx, dataloader_idx
        return previous != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        self._current_eval_dataloader_idx = None

    def disable(self) -> None:
        """Draw nothing from now on (Lightning's bars: on ranks other than 0, or by a program)."""
        self._switched_off = True

    def enable(self) -> None:
        self._switched_off = False

    @property
    def is_enabled(self) -> bool:
        return not self._switched_off and getattr(self, "refresh_rate", 1) > 0

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """Print above the bar (Lightning's ``ProgressBar.print``)."""
        console = getattr(self, "console", None)
        text = sep.join(map(str, args))
        if console is not None:
            console.print(text)
        else:
            print(text, **kwargs)
