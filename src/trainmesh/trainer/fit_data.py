"""Where fit asks for its loaders: where Lightning 2.6 asks (``_FitLoop.setup_data``,
``_EvaluationLoop.setup_data``), so that a program building its data in ``setup`` or
``on_fit_start`` (or reading state set there) gets the same loaders.

Lightning's order: ``on_fit_start``; the sanity check, which asks for ``val_dataloader()`` after
``on_sanity_check_start``; then ``train_dataloader()``; then, where no sanity check asked for it and
the first epoch validates, ``val_dataloader()``; then ``on_train_start``. An epoch that validates
when nothing has asked yet (``check_val_every_n_epoch``) asks at its first validation. Whether
there is validation at all is told without asking (a loader was given, or a loader method is
defined), as Lightning's ``trainer.enable_validation``.
"""

from __future__ import annotations

import math
from typing import Any

from trainmesh.seed import capture_rng_state
from trainmesh.trainer.batch_counts import limited_count
from trainmesh.trainer.combined_loaders import inner_loaders, train_loader
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.evaluation import device_loaders
from trainmesh.trainer.fetching import Fetcher
from trainmesh.trainer.iterator_timing import makes_iterators_as_1_9
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.val_clock import BY_TIME


class FitData:
    """A fit's train loader and its validation loaders, each asked for once, when first needed."""

    def __init__(self, ctx: LoopContext, source: DataSource) -> None:
        self._ctx, self._source = ctx, source
        self._val: list[Any] | None = None
        self._val_limit: int | float = ctx.settings.limit_val_batches  # the limit they were set up with
        self._train: Any = _NOT_ASKED
        # The epochs the loaders were last asked for at (Lightning's _last_*_dl_reload_epoch), which
        # Trainer(reload_dataloaders_every_n_epochs=n) asks again n epochs later.
        self._val_epoch: int | None = None
        self._train_epoch: int | None = None
        # The first epoch's iterator, started where a finder's search ends, and the generators' state
        # as it started (for a resume's replay): (rng state, Fetcher), taken by the fit's first epoch
        self._started_epoch: tuple[dict[str, Any], Fetcher] | None = None
        ctx.state.val_loaders = []

    def _due(self, last: int | None) -> bool:
        every = self._ctx.reload_every_n_epochs
        return every > 0 and (last is None or self._ctx.state.current_epoch - last >= every)

    @property
    def source(self) -> DataSource:
        """Where the fit's loaders come from (the searches' trials read it: ``search_trials.py``)."""
        return self._source

    def use_train_loader(self, loader: Any) -> None:
        """The fit reads ``loader`` (a finder's search's last, as Lightning's fit reads it)."""
        self._source.given["train"], self._train = loader, _NOT_ASKED
        self._started_epoch = None

    def start_first_epoch(self) -> None:
        """Lightning's finders set the fit loop's data up as their search ends (``_FitLoop.setup_data``,
        which makes the train loader's iterator: a shuffling loader's base seed drawn from the global
        generator, read ahead where it has no length), and the fit reads that iterator in its first
        epoch; the learning-rate search does it inside its ``isolate_rng``, so the draw leaves the
        fit's generator untouched. The same here: the loader set up and its iterator started now."""
        loader = self.train_loader()
        count = self._ctx.state.num_training_batches
        if loader is not None and count != 0:
            self._started_epoch = (capture_rng_state(), Fetcher(loader.batches(), count))

    @property
    def asked_train_loader(self) -> Any:
        """The train loader once asked for (None before, or where there is none)."""
        return None if self._train is _NOT_ASKED else self._train

    def take_started_epoch(self) -> tuple[dict[str, Any], Fetcher] | None:
        """The first epoch's iterator :meth:`start_first_epoch` started (and the generators' state
        before it), once; None where none was started."""
        started, self._started_epoch = self._started_epoch, None
        return started

    @property
    def has_val_loaders(self) -> bool:
        return self._val is not None

    def train_reload_due(self) -> bool:
        """Whether this epoch asks for the train loader again (before on_train_epoch_start, as Lightning)."""
        return self._train is not _NOT_ASKED and self._due(self._train_epoch)

    def validation_enabled(self) -> bool:
        """Lightning's ``enable_validation``: validation loaders defined, ``validation_step``
        overridden and ``limit_val_batches`` not 0."""
        ctx = self._ctx
        if ctx.settings.limit_val_batches == 0 or not ctx.hooks.module_replaces("validation_step"):
            return False
        return self._source.defines("validate")

    def validates_in_epoch(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` validates (Lightning's ``_should_check_val_epoch``)."""
        every_n = self._ctx.settings.check_val_every_n_epoch
        return self.validation_enabled() and (every_n is None or (epoch + 1) % every_n == 0)

    def validates_first(self, val_every: int | float | None) -> bool:
        """Whether the fit's first epoch validates before its first batch, as the searches of Lightning
        1.x's ``trainer.tune`` do (``DataSource.validate_first``): where validation is due every
        ``val_every`` batches (not only after the last batch of a loader without a length)."""
        return self._source.validate_first and val_every not in (None, math.inf, BY_TIME)

    def val_loaders(self, *, reload: bool = False) -> list[Any]:
        """The validation loaders, asked for the first time they are needed, and again where
        ``reload_dataloaders_every_n_epochs`` says (a sanity check before an epoch that does not
        validate leaves the next validation to ask again, as Lightning's)."""
        if self._val is None or reload or self._due(self._val_epoch):
            state = self._ctx.state
            if not state.sanity_checking or self.validates_in_epoch(state.current_epoch):
                self._val_epoch = state.current_epoch
            loaders = self._source.loaders("validate", required=False)
            shape = self._source.shapes.get("validate")
            self._val = device_loaders(self._ctx, loaders, train=False, kind="validate", shape=shape)
            state.val_loaders = self._val
            state.eval_step_counts["fit"] = {}  # Lightning's val loop counts its batches from its loaders' setup
            # Lightning counts them as its fit loop's validation sets its loaders up
            limit = self._val_limit = self._ctx.settings.limit_val_batches
            state.batch_counts["fit"] = [
                limited_count(each, limit, "val") for loader in self._val for each in inner_loaders(loader) or [loader]
            ]
        return self._val

    def keep_val_loaders(self, searched: FitData) -> None:
        """The validation loaders a search's trial set up (``searched``), and their count, the fit's: as a
        1.x finder's search leaves them (1.9.5 sets them up again only where they are None or
        ``reload_dataloaders_every_n_epochs`` is due, counting from the search's epoch)."""
        if searched._val is not None:
            self._val, self._val_epoch, self._val_limit = searched._val, searched._val_epoch, searched._val_limit
            self._ctx.state.val_loaders = self._val

    def val_limit(self) -> int | float:
        """The ``limit_val_batches`` the validation loaders were set up with (a 1.x finder's search's, kept)."""
        return self._val_limit

    def train_loader(self, *, reload: bool = False) -> Any:
        """The training loader (set up by the Runtime), and the epoch's batch count from it; None
        with ``limit_train_batches=0`` (as Lightning, which then asks for no loader), a count of 0.
        Asked once (``trainer.estimated_stepping_batches`` may ask first), or again with ``reload``."""
        if self._train is not _NOT_ASKED and not reload:
            return self._train
        ctx = self._ctx
        ctx.state.num_training_batches = 0  # this fit's count: its one writer is here
        self._train = None
        if ctx.settings.limit_train_batches == 0:
            return None
        # Several loaders are read together, as a CombinedLoader (combined_loaders.py)
        given = self._source.loaders("train", required=True)
        shape = self._source.shapes.get("train")
        loaders = [train_loader(given, self._source.train_mode, given_as=shape)]
        (self._train,) = device_loaders(ctx, loaders, train=True, kind="train", shape=shape)
        ctx.state.num_training_batches = limited_count(self._train, ctx.settings.limit_train_batches, "train")
        _check_val_interval_fits(ctx, ctx.state.num_training_batches)
        if ctx.state.num_training_batches != 0:
            self._train_epoch = ctx.state.current_epoch
        if reload and not makes_iterators_as_1_9(ctx):
            # Lightning's setup_data starts the new loader's iterator (reading ahead where it has no
            # length), and the epoch starts another: the first one's draws from the global
            # generators (the iterator's base seed) and reads happen here too. 1.9.5 starts only the epoch's.
            Fetcher(self._train.batches(), ctx.state.num_training_batches)
        return self._train


_NOT_ASKED = object()


def _check_val_interval_fits(ctx: LoopContext, count: int | float) -> None:
    """As Lightning's fit loop as it sets up its train loader: an integer ``val_check_interval`` over
    the epoch's batch count would never validate where the count restarts every epoch."""
    settings = ctx.settings
    interval = settings.val_check_interval
    if isinstance(interval, int) and interval > count and count != 0:
        if settings.check_val_every_n_epoch is not None and settings.limit_val_batches > 0:
            raise ValueError(  # Lightning's type
                f" `val_check_interval` ({interval}) must be less than or equal"
                f" to the number of the training batches ({count})."
                " If you want to disable validation set `limit_val_batches` to 0.0 instead."
                " If you want to validate based on the total training batches, set `check_val_every_n_epoch=None`."
            )
