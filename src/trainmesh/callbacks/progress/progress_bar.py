"""Lightning's ``callbacks.progress.progress_bar`` path: ``ProgressBar``, the base a custom bar
subclasses, and ``get_standard_metrics`` (what a bar shows beside the logged values).

The base draws nothing, as Lightning's: it keeps the Trainer, names the stages, counts the batches
a bar draws (``total_train_batches``, ``total_val_batches``, the current evaluation loader's) and
tracks the loader in use; ``disable``/``enable`` are the subclass's to write. trainmesh's drawing
bar (drawing_bar.py), under Lightning's names ``TQDMProgressBar`` and ``RichProgressBar``, is one
such subclass."""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.callbacks.progress.bar_text import get_standard_metrics
from trainmesh.trainer_view import TrainerView

__all__ = ["ProgressBar", "get_standard_metrics"]


class ProgressBar(Callback):
    """Lightning 2.6's progress bar base: the members a bar reads, read from the Trainer it was set up with.

    Examples:
        >>> class PercentBar(ProgressBar):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.shown = True
        ...     def disable(self):
        ...         self.shown = False
        ...     def enable(self):
        ...         self.shown = True
        >>> PercentBar().train_description
        'Training'
    """

    def __init__(self) -> None:
        self._trainer: TrainerView | None = None
        self._current_eval_dataloader_idx: int | None = None

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

    def _current(self, batches: list[int | float] | int | float) -> int | float:
        # Lightning's: which loader is current is known once has_dataloader_changed was called.
        if isinstance(batches, list):
            assert self._current_eval_dataloader_idx is not None
            return batches[self._current_eval_dataloader_idx]
        return batches

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        trainer = self.trainer
        return self._current(trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches)

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        return self._current(self.trainer.num_test_batches)

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        assert self._current_eval_dataloader_idx is not None
        result: int | float = self.trainer.num_predict_batches[self._current_eval_dataloader_idx]
        return result

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
        """The subclass's way to stop drawing (called on ranks other than 0)."""
        raise NotImplementedError

    def enable(self) -> None:
        """The subclass's way to draw again."""
        raise NotImplementedError

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print without breaking the bar (here: ``print``; a drawing bar prints above itself)."""
        print(*args, **kwargs)

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        """Keep the Trainer; on a rank other than 0, ``disable()`` (Lightning's)."""
        self._trainer = trainer
        if not getattr(trainer, "is_global_zero", True):
            self.disable()

    def get_metrics(self, trainer: TrainerView, pl_module: Any) -> dict[str, Any]:
        """What a bar shows, as Lightning's: the loggers' version (``v_num``) and
        ``trainer.progress_bar_metrics``. Override it to change what is shown.

        Args:
            trainer: the running Trainer.
            pl_module: the module being run.

        Examples:
            >>> class NoVersion(ProgressBar):
            ...     def get_metrics(self, trainer, pl_module):
            ...         items = super().get_metrics(trainer, pl_module)
            ...         items.pop("v_num", None)
            ...         return items
        """
        standard = get_standard_metrics(trainer)
        logged = trainer.progress_bar_metrics
        duplicates = list(standard.keys() & logged.keys())
        if duplicates:
            from trainmesh.utilities.rank_zero import rank_zero_warn

            rank_zero_warn(  # Lightning's words
                f"The progress bar already tracks a metric with the name(s) '{', '.join(duplicates)}' and"
                f" `self.log('{duplicates[0]}', ..., prog_bar=True)` will overwrite this value. "
                " If this is undesired, change the name or override `get_metrics()` in the progress bar callback.",
            )
        return {**standard, **logged}
