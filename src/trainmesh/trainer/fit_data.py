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

from typing import Any

from trainmesh.trainer.batch_counts import limited_count
from trainmesh.trainer.combined_loaders import train_loader
from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.evaluation import device_loaders
from trainmesh.trainer.loop_context import LoopContext


class FitData:
    """A fit's train loader and its validation loaders, each asked for once, when first needed."""

    def __init__(self, ctx: LoopContext, source: DataSource) -> None:
        self._ctx, self._source = ctx, source
        self._val: list[Any] | None = None
        ctx.state.val_loaders = []

    def validation_enabled(self) -> bool:
        """Lightning's ``enable_validation``: validation loaders defined, ``validation_step``
        overridden and ``limit_val_batches`` not 0."""
        ctx = self._ctx
        if ctx.settings.limit_val_batches == 0 or not ctx.hooks.module_overrides("validation_step"):
            return False
        return self._source.defines("validate")

    def validates_in_epoch(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` validates (Lightning's ``_should_check_val_epoch``)."""
        every_n = self._ctx.settings.check_val_every_n_epoch
        return self.validation_enabled() and (every_n is None or (epoch + 1) % every_n == 0)

    def val_loaders(self) -> list[Any]:
        """The validation loaders, asked for the first time they are needed."""
        if self._val is None:
            loaders = self._source.loaders("validate", required=False)
            self._val = device_loaders(self._ctx, loaders, train=False)
            self._ctx.state.val_loaders = self._val
        return self._val

    def train_loader(self) -> Any:
        """The training loader (set up by the Runtime), and the epoch's batch count from it; None
        with ``limit_train_batches=0`` (as Lightning, which then asks for no loader), a count of 0."""
        ctx = self._ctx
        ctx.state.num_training_batches = 0  # this fit's count: its one writer is here
        if ctx.settings.limit_train_batches == 0:
            return None
        # Several loaders are read together, as a CombinedLoader (combined_loaders.py)
        loaders = [train_loader(self._source.loaders("train", required=True), self._source.train_mode)]
        (loader,) = device_loaders(ctx, loaders, train=True)
        ctx.state.num_training_batches = limited_count(loader, ctx.settings.limit_train_batches)
        return loader
