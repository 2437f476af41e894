"""What a program reads of Lightning's bars: ``TQDMProgressBar.train_progress_bar`` (``val_``,
``test_``, ``predict_``), a tqdm whose ``n`` and ``total`` its callbacks and tests read, and
``RichProgressBar.train_progress_bar`` (``val_``, ``test_``), a rich ``Task`` read as ``completed``
and ``total``. trainmesh's bar draws its own line: it keeps these counts, as Lightning's bars keep
them (``n`` moves every ``refresh_rate`` batches and at the last), in one object per stage."""

from __future__ import annotations

import math
from typing import Any

from trainmesh.trainer_view import TrainerView

# The members (members.py) each stage's total is read from, as Lightning's bars read them.
_TOTALS = {
    "train": "total_train_batches",
    "val": "total_val_batches_current_dataloader",
    "val_sanity": "total_val_batches_current_dataloader",
    "test": "total_test_batches_current_dataloader",
    "predict": "total_predict_batches_current_dataloader",
}

# The evaluation stage of each of the Trainer's batch counts trainmesh's bar reads.
STAGE_OF_COUNT = {"val_loader_batches": "val", "test_loader_batches": "test", "predict_loader_batches": "predict"}


def _known(total: int | float | None) -> int | float | None:
    """None for a count nobody knows (a loader without a length), as Lightning's ``convert_inf``."""
    return None if total is None or math.isinf(total) or math.isnan(total) else total


def _total(owner: Any, stage: str) -> int | float | None:
    try:
        return _known(getattr(owner, _TOTALS[stage]))
    except TypeError:  # a bar driven without setup (no Trainer): no total to show
        return None


class StageBar:
    """One stage's bar as a program reads it: tqdm's ``n``/``total``/``desc`` and rich's ``Task``
    ``completed``/``total``/``description`` (the same counts under both libraries' names).

    Examples:
        >>> bar = StageBar("Training", 4)
        >>> bar.n, bar.completed, bar.total, bar.desc
        (0, 0, 4, 'Training')
    """

    def __init__(self, description: str, total: int | float | None) -> None:
        self.description = description
        self.total = _known(total)
        self.n = 0

    @property
    def completed(self) -> int:
        return self.n

    @property
    def desc(self) -> str:
        return self.description


class StageBars:
    """The stages' bars of one progress bar callback. A stage's object is kept (and reset) from one
    run of it to the next, as Lightning's train bar is reset each epoch; Lightning's rich bar drops
    them all when a run starts after a run ended (it makes a new rich Progress then)."""

    def __init__(self) -> None:
        self._bars: dict[str, StageBar] = {}
        self._ended = False

    def end(self) -> None:
        """A run (fit, validate, test, predict) ended: its teardown."""
        self._ended = True

    @staticmethod
    def stage_of(owner: Any, trainer: TrainerView, count_attr: str) -> str:
        """The stage an evaluation counts under: Lightning's rich bar counts the sanity check under
        ``val_sanity_progress_bar``, its tqdm bar under ``val_progress_bar``."""
        stage = STAGE_OF_COUNT[count_attr]
        sanity = stage == "val" and getattr(trainer, "sanity_checking", False)
        return "val_sanity" if sanity and getattr(owner, "_counts_every_batch", False) else stage

    def start(self, owner: Any, stage: str, description: str, *, sanity: bool = False) -> None:
        if self._ended and getattr(owner, "_counts_every_batch", False):
            self._bars.clear()
        self._ended = False
        if sanity and not getattr(owner, "_counts_every_batch", False):
            self._bars["train"] = StageBar("", None)  # Lightning's tqdm: a disabled train bar until training
        bar = self._bars.setdefault(stage, StageBar(description, None))
        # An evaluation's total is its current loader's, set at its first batch (as Lightning's bars)
        bar.description, bar.total, bar.n = description, _total(owner, "train") if stage == "train" else None, 0

    def advance(self, owner: Any, stage: str, done: int, *, new_loader: bool = False) -> None:
        """``done`` batches of the stage's current loader (``new_loader``: its first batch)."""
        bar = self._bars.get(stage)
        if bar is None:
            return
        bar.total = _total(owner, stage)
        bar.n = 0 if new_loader else bar.n
        # rich's Task counts every batch (redrawn every refresh_rate); tqdm's n moves as it redraws
        every = 1 if getattr(owner, "_counts_every_batch", False) else getattr(owner, "refresh_rate", 1)
        if every > 0 and (done % every == 0 or done == bar.total):
            bar.n = done

    def get(self, stage: str) -> StageBar | None:
        return self._bars.get(stage)


def _stage_bar(owner: Any, stage: str, *, rich: bool) -> StageBar:
    bars: StageBars | None = getattr(owner, "_stage_bars", None)
    found = bars.get(stage) if bars is not None else None
    if found is not None:
        return found
    if rich:  # Lightning's RichProgressBar asserts its progress exists
        raise AssertionError(f"{type(owner).__name__}.{stage}_progress_bar: no {stage} run has started yet")
    raise TypeError(f"The `{type(owner).__name__}._{stage}_progress_bar` reference has not been set yet.")


class TqdmStageBars:
    """``TQDMProgressBar``'s bar properties (Lightning 2.6): a TypeError until the stage starts."""

    @property
    def train_progress_bar(self) -> StageBar:
        return _stage_bar(self, "train", rich=False)

    @property
    def val_progress_bar(self) -> StageBar:
        return _stage_bar(self, "val", rich=False)

    @property
    def test_progress_bar(self) -> StageBar:
        return _stage_bar(self, "test", rich=False)

    @property
    def predict_progress_bar(self) -> StageBar:
        return _stage_bar(self, "predict", rich=False)


class RichStageBars:
    """``RichProgressBar``'s bar properties (Lightning 2.6 has no ``predict_progress_bar`` there)."""

    _counts_every_batch = True

    @property
    def train_progress_bar(self) -> StageBar:
        return _stage_bar(self, "train", rich=True)

    @property
    def val_progress_bar(self) -> StageBar:
        return _stage_bar(self, "val", rich=True)

    @property
    def test_progress_bar(self) -> StageBar:
        return _stage_bar(self, "test", rich=True)

    @property
    def val_sanity_check_bar(self) -> StageBar:  # Lightning's name
        return _stage_bar(self, "val_sanity", rich=True)
