"""What the Module's manual-optimization methods do: ``self.optimizers()``, ``lr_schedulers()``,
``toggle_optimizer``/``untoggle_optimizer``, ``clip_gradients`` and the ``manual_backward`` the
loop hands a manual module.

A low module beside module.py: it reads the running Trainer through ``TrainerView`` and imports
nothing from ``trainmesh.trainer``, so the Module reaches these calls without an import running
back up to the loop. The loop's own side of manual optimization (the settings it refuses, the
step hooks, the optimizer wrapper whose ``step()`` counts in ``global_step``) stays in
trainer/manual_optimization.py, which imports this module.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.strategies.step import ManualSync
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.wrapped_objects import sharing_state, slot_method


class ManualBackward:
    """``module.manual_backward(loss)``: backward through the runtime (precision loss scaling; with
    on_before_backward/on_after_backward around it where overridden: trainer/optimization_hooks.py), as
    the strategy running the step has it happen (``sync``, a ``ManualSync`` set for the step by
    ``StepHooks.backward_scope``: DDP prepares its reducer for this loss; dp's chunks backpropagate
    their losses' mean)."""

    def __init__(self, backward: Callable[..., None]) -> None:
        self._backward = backward
        self.sync = ManualSync()

    @contextlib.contextmanager
    def scope(self, sync: ManualSync) -> Iterator[None]:
        previous, self.sync = self.sync, sync
        try:
            yield
        finally:
            self.sync = previous

    def __call__(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # backward's own arguments (retain_graph=True, ...) reach the module's backward hook
        self.sync.backward(loss, lambda reduced: self._backward(reduced, *args, **kwargs))


def sync_of(trainer: TrainerView) -> ManualSync:
    """How the running step's manual-optimization calls meet its strategy (a plain ``ManualSync``
    outside a manual step)."""
    return sync_in(getattr(trainer, "manual_backward", None))


def sync_in(manual: Any) -> ManualSync:
    """The ``ManualSync`` of a loop state's ``manual_backward`` (None outside manual optimization)."""
    return manual.sync if isinstance(manual, ManualBackward) else ManualSync()


def optimizers_of(trainer: TrainerView, *, wrapped: bool) -> Any:
    """One optimizer, or a list when configure_optimizers made several (as Lightning returns)."""
    given = trainer.optimizers
    if not given:
        raise RuntimeError(
            "self.optimizers() is available once fit has called configure_optimizers (in training_step, say)"
        )
    steps = (
        trainer.manual_steps
    )  # LightningOptimizers over the run's optimizers, or (use_pl_optimizer=False) the user's
    found = steps.wrap_all() if wrapped and steps is not None else list(given)
    return found[0] if len(found) == 1 else found


def lr_schedulers_of(trainer: TrainerView) -> Any:
    """None, one scheduler, or a list (Lightning's forms)."""
    sync = sync_of(trainer)
    found = [
        SteppedOnce.of(config.scheduler, sync, what=f"lr scheduler {i}.step()") if sync.parts > 1 else config.scheduler
        for i, config in enumerate(trainer.lr_scheduler_configs)
    ]
    if not found:
        return None
    return found[0] if len(found) == 1 else found


class SteppedOnce:
    """A scheduler whose ``step()`` runs once for every part of a step that runs training_step
    (dp's chunks). It is the user's scheduler to anyone who asks: a subclass of its class sharing
    its ``__dict__`` (utilities/wrapped_objects.py), so ``last_epoch`` is the scheduler's own and the
    manual optimization docs' ``isinstance(sch, ReduceLROnPlateau)`` check keeps working. Where a
    step runs training_step once, ``lr_schedulers()`` hands the user's scheduler itself, as
    Lightning does. Made by ``SteppedOnce.of(scheduler, sync, what=...)``."""

    __slots__ = ("_tm_scheduler", "_tm_sync", "_tm_what", "_tm_step")
    step = slot_method("_tm_step")

    _tm_scheduler: Any
    _tm_sync: ManualSync
    _tm_what: str
    _tm_step: Callable[..., Any]

    @classmethod
    def of(cls, scheduler: Any, sync: ManualSync, *, what: str) -> SteppedOnce:
        made = sharing_state(cls, scheduler)
        made._tm_scheduler, made._tm_sync, made._tm_what = scheduler, sync, what
        made._tm_step = types.MethodType(cls._once, made)
        return made

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled and copied as what it wraps, wrapped again (its class is made at run time: not importable)
        return (functools.partial(SteppedOnce.of, what=self._tm_what), (self._tm_scheduler, self._tm_sync))

    def _once(self, *args: Any, **kwargs: Any) -> Any:
        return self._tm_sync.once(lambda: self._tm_scheduler.step(*args, **kwargs), what=self._tm_what)


def _parameters(optimizer: Any) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def toggle_optimizer(trainer: TrainerView, optimizer: Any) -> dict[torch.Tensor, bool]:
    """Freeze every parameter of the other optimizers (their requires_grad, saved for untoggle),
    so that this optimizer's backward computes no gradient for them, as Lightning does."""
    saved: dict[torch.Tensor, bool] = {}
    for other in trainer.optimizers:
        for param in _parameters(other):
            if param not in saved:
                saved[param] = param.requires_grad
                param.requires_grad_(False)
    for param in _parameters(optimizer):
        param.requires_grad_(saved.get(param, True))
    return saved


def untoggle_optimizer(saved: dict[torch.Tensor, bool]) -> None:
    for param, requires_grad in saved.items():
        param.requires_grad_(requires_grad)


def toggle_module(module: Any, optimizer: Any) -> None:
    """``module.toggle_optimizer(optimizer)``: toggled once for the step, what it changed kept on the module."""

    def toggle() -> None:
        object.__setattr__(module, "_toggled", toggle_optimizer(module.trainer, optimizer))

    sync_of(module.trainer).once(toggle, what="toggle_optimizer()")


def untoggle_module(module: Any) -> None:
    """``module.untoggle_optimizer(optimizer)``: what toggle_module changed, put back once."""
    # Lightning's reads self.trainer.optimizers first: under Fabric that raises its AttributeError, as toggle's does
    module.trainer.optimizers  # noqa: B018 - the read is the check
    sync_of(module.trainer).once(
        lambda: untoggle_optimizer(module.__dict__.pop("_toggled", {})), what="untoggle_optimizer()"
    )


class ClipSettingClash(MisconfiguredValue):
    """A clip value or algorithm given both to the Trainer and to ``clip_gradients``: Lightning raises
    ``MisconfigurationException``, which programs catch (a ValueError too, as trainmesh raised before)."""


def clip_gradients(
    trainer: TrainerView, optimizer: Any, value: float | None, algorithm: str | None
) -> torch.Tensor | None:
    """Clip the gradients of ``optimizer``'s parameters, as Lightning's ``LightningModule.clip_gradients``:
    None takes the Trainer's setting (no clipping without one), a different value than the Trainer's is
    refused. Through the strategy's clip (one global norm across shards under fsdp), on the gradients as
    they are (Lightning's unscales none here)."""
    trainer_value, trainer_algorithm = trainer.gradient_clip_val, trainer.gradient_clip_algorithm
    if value is None:
        value = trainer_value or 0.0
    elif trainer_value is not None and trainer_value != value:
        raise ClipSettingClash(
            f"clip_gradients(gradient_clip_val={value!r}) with Trainer(gradient_clip_val={trainer_value!r}): "
            "give the value in one place only (as Lightning requires)"
        )
    if algorithm is None:
        algorithm = trainer_algorithm or "norm"
    else:
        algorithm = algorithm.lower()
        if trainer_algorithm is not None and trainer_algorithm != algorithm:
            raise ClipSettingClash(
                f"clip_gradients(gradient_clip_algorithm={algorithm!r}) with Trainer(gradient_clip_algorithm="
                f"{trainer_algorithm!r}): give the algorithm in one place only (as Lightning requires)"
            )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"gradient_clip_val must be an int or a float, got {value!r}")
    if algorithm not in ("norm", "value"):
        raise MisconfiguredValue(f"gradient_clip_algorithm={algorithm!r}; use 'norm' or 'value'")
    if value <= 0:
        return None  # Lightning's: 0 (or no value anywhere) clips nothing
    steps = trainer.manual_steps  # None before fit: then no ManualOptimizer was handed out
    inner = steps.unwrap(optimizer) if steps is not None else optimizer
    runtime = trainer.runtime
    # Lightning's clips the gradients as they are: unscaled by then in automatic optimization (the loop
    # unscales before on_before_optimizer_step and configure_gradient_clipping), still scaled under
    # 16-mixed in manual optimization, where its precision unscales only in optimizer.step()
    norm: torch.Tensor | None = (
        runtime.clip_gradients(trainer.model, inner, max_norm=value, unscale=False)
        if algorithm == "norm"
        else runtime.clip_gradients(trainer.model, inner, clip_val=value, unscale=False)
    )
    return norm
