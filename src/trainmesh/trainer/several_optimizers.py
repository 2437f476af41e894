"""Several optimizers in automatic optimization, refused as Lightning 2.6 refuses them: right after
``configure_optimizers`` (its ``_validate_multiple_optimizers_support``), before ``on_fit_start``, the model
summary and the logger's ``hparams.yaml``. A ``training_step`` that declares ``optimizer_idx`` takes
turns as Lightning 1.x's (lightning1/optimizer_turns.py, which asks the rest at the epoch's start)."""

from __future__ import annotations

from typing import Any


class SeveralOptimizersRefused(RuntimeError, ValueError):
    """What neither Lightning runs with its optimizers: a ``RuntimeError`` as Lightning 2.x raises it
    (``_validate_multiple_optimizers_support``), and a ``ValueError`` as 1.9.5's loop raised it, so that
    either version's ``except`` catches it."""


# Lightning 2.x's words (core/optimizer.py), which a program may match
REMOVE_OPTIMIZER_IDX = (
    "Training with multiple optimizers is only supported with manual optimization. Remove the `optimizer_idx`"
    " argument from `training_step`, set `self.automatic_optimization = False` and access your optimizers"
    " in `training_step` with `opt1, opt2, ... = self.optimizers()`."
)
SET_MANUAL = (
    "Training with multiple optimizers is only supported with manual optimization. Set"
    " `self.automatic_optimization = False`, then access your optimizers in `training_step` with"
    " `opt1, opt2, ... = self.optimizers()`."
)


def refuse_several_automatic(module: Any, count: int, *, manual: bool, takes_index: bool) -> None:
    """Lightning 2.x's refusal of ``count`` optimizers in automatic optimization where ``training_step``
    takes no ``optimizer_idx`` (with it, 1.x's turns run them), Lightning's words then why and how.

    >>> refuse_several_automatic(object(), 1, manual=False, takes_index=False)  # one optimizer: nothing to say
    """
    if count > 1 and not manual and not takes_index:
        name = type(module).__name__
        raise SeveralOptimizersRefused(
            f"{SET_MANUAL} ({name}.configure_optimizers returned {count} optimizers, but training_step takes no "
            "optimizer_idx: in automatic optimization Lightning calls training_step once per optimizer with its "
            "index (1.x: training_step(self, batch, batch_idx, optimizer_idx)), and 2.x refuses several optimizers. "
            "Use manual optimization (self.automatic_optimization = False; opt_a, opt_b = self.optimizers() in "
            "training_step; the Lightning 2.x way), add optimizer_idx, or return one optimizer)"
        )
