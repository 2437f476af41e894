"""1.x's ``pytorch_lightning.loops.optimization.optimizer_loop``: ``OptimizerLoop`` as a base class whose
subclass replaces how each optimizer's closure gets its loss (yielding_training_step.py's ``YieldLoop``:
``_make_step_fn``), connected with ``trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=...)``,
and its ``ClosureResult``. trainmesh's several-optimizer loop (1.x's turns, trainer/lightning1/) runs the
turns, toggling, zero_grad, backward and steps; of a connected loop it calls ``on_run_start(optimizers,
kwargs)`` once per batch and, for each optimizer's turn, ``_make_step_fn(self._build_kwargs(kwargs,
optimizer_idx, None))()``, whose ``closure_loss`` is what backward runs on. ``ManualOptimization`` is refused.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch

from trainmesh.loops.loop import Loop, trainer_loop_class
from trainmesh.utilities.exceptions import MisconfigurationException

__all__ = ["ClosureResult", "ManualOptimization", "OptimizerLoop"]

ManualOptimization = trainer_loop_class("ManualOptimization", __name__)


@dataclass
class ClosureResult:
    """1.x's result of a closure's step: ``closure_loss`` (backward runs on it), ``loss`` (its detached
    copy) and ``extra`` (the rest of a dict the step returned).

    Examples:
        >>> ClosureResult.from_training_step_output({"loss": torch.tensor(4.0), "n": 1}, 2).closure_loss
        tensor(2.)
    """

    closure_loss: torch.Tensor | None
    loss: torch.Tensor | None = field(init=False, default=None)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.closure_loss is not None:
            self.loss = self.closure_loss.detach().clone()

    @classmethod
    def from_training_step_output(cls, training_step_output: Any, normalize: int = 1) -> ClosureResult:
        """A step's output (a loss, a dict with ``"loss"``, or None) with the loss divided by ``normalize``
        (1.x passes ``accumulate_grad_batches``)."""
        closure_loss, extra = None, {}
        if isinstance(training_step_output, dict):
            closure_loss = training_step_output.get("loss")
            if closure_loss is None:
                raise MisconfigurationException(
                    "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present"
                )
            extra = {k: v for k, v in training_step_output.items() if k not in ("loss", "hiddens")}
        elif isinstance(training_step_output, torch.Tensor):
            closure_loss = training_step_output
        elif training_step_output is not None:
            raise MisconfigurationException(
                "In automatic optimization, `training_step` must return a Tensor, a dict, or None (where the step "
                "will be skipped)."
            )
        if closure_loss is not None:
            closure_loss = closure_loss / normalize
        return cls(closure_loss, extra=extra)

    def asdict(self) -> dict[str, Any]:
        return {"loss": self.loss, **self.extra}


class OptimizerLoop(Loop):
    """1.x's loop over a batch's optimizers, as a base class to connect a subclass of (see the module).

    Examples:
        >>> OptimizerLoop().connect()
        Traceback (most recent call last):
        ...
        NotImplementedError: OptimizerLoop does not connect any child loops.
    """

    def __init__(self) -> None:
        super().__init__()
        self._indices: tuple[int, ...] = ()
        self._optimizers: tuple[Any, ...] = ()
        self._hiddens: Any = None

    @property
    def done(self) -> bool:
        return True  # trainmesh's turns run the optimizers; run() is never its loop

    def connect(self, **kwargs: Loop) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not connect any child loops.")

    def reset(self) -> None:
        """Nothing to reset: the turns' state is trainmesh's."""

    def advance(self, *args: Any, **kwargs: Any) -> None:
        """Not called: trainmesh's turns advance through the optimizers."""

    def on_run_start(self, optimizers: list[tuple[int, Any]], kwargs: OrderedDict) -> None:
        """Once per batch, before the turns: the active ``(index, optimizer)`` pairs and the step's
        ``OrderedDict(batch=..., batch_idx=...)``."""
        self._indices, self._optimizers = zip(*optimizers) if optimizers else ((), ())

    def _build_kwargs(self, kwargs: OrderedDict, opt_idx: int, hiddens: Any) -> OrderedDict:
        """1.x's ``_build_training_step_kwargs``: ``optimizer_idx`` added where there are several optimizers
        and ``training_step`` declares it (several without it: refused, as 1.x)."""
        module = self.trainer.lightning_module
        if len(self.trainer.optimizers) > 1:
            if "optimizer_idx" in inspect.signature(module.training_step).parameters:
                if not module.automatic_optimization:
                    raise ValueError(
                        "Your `LightningModule.training_step` signature contains an `optimizer_idx` argument but in "
                        "manual optimization optimizers must be handled by the user. Remove the optimizer_idx "
                        "argument or set `self.automatic_optimization = True`."
                    )
                kwargs["optimizer_idx"] = opt_idx
            elif module.automatic_optimization:
                raise ValueError(
                    f"Your LightningModule defines {len(self.trainer.optimizers)} optimizers but `training_step` is "
                    "missing the `optimizer_idx` argument."
                )
        return kwargs

    def _make_step_fn(self, kwargs: OrderedDict) -> Callable[[], ClosureResult]:
        """The step of one optimizer's closure: 1.x's ``training_step`` through the strategy, then
        ``training_step_end``."""
        return partial(self._training_step, kwargs)

    def _training_step(self, kwargs: OrderedDict) -> ClosureResult:
        trainer = cast(Any, self.trainer)  # 1.x's members beyond TrainerView: the Trainer's own
        output = trainer.strategy.training_step(*kwargs.values())
        trainer.strategy.post_training_step()
        model_output = trainer._call_lightning_module_hook("training_step_end", output)
        strategy_output = trainer._call_strategy_hook("training_step_end", output)
        output = strategy_output if model_output is None else model_output
        return ClosureResult.from_training_step_output(output, trainer.accumulate_grad_batches)
