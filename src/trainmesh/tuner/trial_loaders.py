"""The train loaders of Lightning 2.6's batch-size search, asked for when its fit loop asks.

Lightning's search runs its trials in one fit loop, whose train loader is made by
``train_dataloader()`` only when the loop's data is reset: once before the first trial (the first
size adjustment measures the dataset with it, so the first trial reads the loader made at the
model's own batch size, before ``init_val`` is set), again after each adjustment that changed the size
(or followed a trial that failed), and once more as the search ends. Measuring the dataset reads the
loader the loop holds; it asks for none. trainmesh runs each trial as the fit's training loop again
(trainer/search_trials.py) and hands it the loader Lightning's trial would read, so
``train_dataloader()`` is called as often, at the same sizes, and the random numbers it draws (or its
loaders' shuffles draw) leave the generators where Lightning's leave them. (A 1.x run's search,
pytorch-lightning 1.9.5's, asks for its loaders by its own rule: trainer/lightning1/batch_size_search.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TrialLoaders:
    """The loader each trial reads, made by the model's (or data module's) ``train_dataloader()``."""

    def __init__(self, source: Any, fit_on: Callable[[Any], None]) -> None:
        """``source``: the model or data module whose ``train_dataloader()`` makes the loaders;
        ``fit_on(loader)``: one trial on ``loader``, the fit's training loop again from step 0."""
        self._source, self._fit_on = source, fit_on
        self._loader: Any = None

    def current(self) -> Any:
        """The loader the next trial reads: made on the first request (Lightning's first ``setup_data``)."""
        if self._loader is None:
            self.reset()
        return self._loader

    def reset(self) -> None:
        """A new loader at the present size (Lightning's ``_reset_dataloaders``)."""
        self._loader = self._source.train_dataloader()

    def dataset_length(self) -> int | None:
        """The train dataset's length, of the loader the next trial reads (None: unknown)."""
        try:
            return len(self.current().dataset)
        except (AttributeError, TypeError, NotImplementedError):
            return None

    def trial(self) -> None:
        """One trial: the fit's training loop for ``steps_per_trial`` steps on the present loader."""
        self._fit_on(self.current())

    def finish(self, *, fit_follows: bool = False) -> Any:
        """Lightning's ``__scale_batch_restore_params`` resets the loop's data as the search ends: the
        loader asked for again (at the size found) and its iterator made, which draws the loader's base
        seed from the global generator; so the fit after the search shuffles as Lightning's does. With
        ``fit_follows`` (a ``BatchSizeFinder`` in a fit) Lightning's fit reads that loader and iterator,
        whose iterator the fit makes; otherwise it is made (and dropped) here. Either way the loader is
        returned: it is Lightning's ``trainer.train_dataloader`` after the search."""
        self.reset()
        loader, self._loader = self._loader, None
        if not fit_follows:
            iterator = iter(loader)
            del iterator  # a loader with workers shuts them down
        return loader
