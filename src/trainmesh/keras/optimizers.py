"""Every Keras optimizer that applies gradients during a distributed ``fit`` applies their average.

Keras' own ``train_step`` calls ``model.optimizer.apply``, but a ``train_step`` of the user's may
apply others: keras-io's GAN guide compiles with ``d_optimizer=`` and ``g_optimizer=`` and applies
each in turn; a step may make an optimizer of its own, or call ``apply_gradients`` (which calls
``apply``). Each must see the gradients averaged over the processes, or each process trains a
model of its own, silently. So for the length of one ``fit`` in a process, ``apply`` of Keras'
optimizer classes (``BaseOptimizer``'s, and that of each Keras subclass defining its own, such as
``LossScaleOptimizer`` and ``MultiOptimizer``) goes through ``through``, and is Keras' own again
afterwards; the user's optimizer objects are left as they are. Only the outermost ``apply`` of a
call goes through it: a ``LossScaleOptimizer`` or ``MultiOptimizer`` calls its inner optimizers'
``apply`` with gradients already averaged.

Gradients reach a Keras optimizer only through ``apply``; a step that updates variables by hand
(``variable.assign_sub``) or with a torch optimizer bypasses every optimizer, and this with it (the
gradients ``loss.backward()`` leaves are averaged as the pass ends, keras/backward.py, but not those of
``torch.autograd.grad``, and an update made outside an optimizer is not one this can check): a
fit whose first training step applied no Keras optimizer is stopped there (:func:`refuse_unaveraged_step`). An
optimizer class of the user's own that overrides ``apply`` (or ``apply_gradients``) runs its override above
Keras' ``apply``: on the gradients the step gives it. Those ``loss.backward()`` left (Keras' own
``train_step``, a step of the user's reading ``v.value.grad``) were averaged as the pass ended, so the
override sees what one process's sees, a clip or a centralization included (keras-io's gradient
centralization as an ``apply`` override was refused, where it trains within float noise of one process).
Gradients computed otherwise are averaged only in Keras' ``apply``, below the override, which would then
clip each process's part of the batch: refused at that optimizer's first ``apply``, before it updates
(:func:`refuse_own_apply`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

# (optimizer, Keras' own apply as a function of (optimizer, gradients, variables), gradients, variables)
Through = Callable[[Any, Callable[..., Any], Any, Any], Any]

_applying = [False]  # inside an apply that went through: inner optimizers' applies are Keras' own
# The optimizers whose apply went through during this fit, in the order they first applied; and
# what to do before an optimizer's first apply (a resumed fit's saved state: preemption.py).
_applied: list[Any] = []
_before_first_apply: dict[int, Callable[[Any, Any], None]] = {}


def applied_optimizers() -> list[Any]:
    """The optimizers whose ``apply`` went through since the fit began (outermost ones only)."""
    return list(_applied)


def before_first_apply(optimizer: Any, action: Callable[[Any, Any], None]) -> None:
    """Run ``action(optimizer, variables)`` just before ``optimizer`` first applies gradients in this
    fit, when the variables it optimizes are known (a Keras optimizer builds its state on them)."""
    _before_first_apply[id(optimizer)] = action


def own_overrides(optimizer: Any, names: tuple[str, ...]) -> list[str]:
    """``Class.name`` for each of ``names`` that a class above Keras' own in ``optimizer``'s class
    hierarchy (a user's subclass) defines."""
    found = []
    for cls in type(optimizer).__mro__:
        if cls.__module__.split(".")[0] == "keras":
            break
        found += [f"{cls.__qualname__}.{name}" for name in names if name in vars(cls)]
    return found


def refuse_own_apply(optimizer: Any, overrides: list[str], world: int) -> None:
    """An optimizer whose ``apply``/``apply_gradients`` is the user's, given gradients no backward pass of the
    step averaged: refused (see the module's doc)."""
    if overrides and world > 1:
        raise ValueError(
            f"the optimizer {type(optimizer).__name__} overrides {' and '.join(overrides)}: under {world} processes "
            "its gradients were not those a loss.backward() of the training step left (computed otherwise, as with "
            "torch.autograd.grad), which Keras' BaseOptimizer.apply averages across the processes, below the "
            "override: the override ran on each process's own gradients (a clip or a normalisation there would see "
            "one process's part of the batch) and the run would differ from one process's, silently. Compute the "
            "gradients with loss.backward() and give the optimizer v.value.grad (averaged as the pass ends), put "
            "the change in update_step (it sees the averaged gradients), or run on one process"
        )


def refuse_unaveraged_step(world: int) -> None:
    """After a training step: under several processes, some Keras optimizer must have applied
    gradients since the fit began (a step updating by hand, or with a torch optimizer, would train
    each process's model on its own share, silently: stopped after its first step)."""
    if world > 1 and not _applied:
        raise RuntimeError(
            f"the model's train_step ran a training step without applying gradients through a Keras optimizer's "
            f"apply (optimizer.apply or apply_gradients): under {world} processes trainmesh averages the gradients "
            "there only, so each process would train its model on its own share of the data and the models would "
            "drift apart, silently. Apply the gradients with a Keras optimizer "
            "(self.optimizer.apply(gradients, self.trainable_weights)) in every training step, or run on one process"
        )


def keras_classes_with_apply() -> list[type]:
    """Keras' optimizer classes that define ``apply`` themselves (the base class first)."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    found, pending = [], [BaseOptimizer]
    while pending:
        cls = pending.pop(0)
        if cls.__module__.split(".")[0] == "keras" and "apply" in vars(cls) and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@contextlib.contextmanager
def every_apply_through(through: Through) -> Iterator[None]:
    """Each Keras optimizer's ``apply`` calls ``through`` within the block (not nested ones)."""
    keras_methods = {cls: vars(cls)["apply"] for cls in keras_classes_with_apply()}
    _applied.clear()
    for cls, keras_apply in keras_methods.items():
        type.__setattr__(cls, "apply", _routed(keras_apply, through))
    try:
        yield
    finally:
        for cls, keras_apply in keras_methods.items():
            type.__setattr__(cls, "apply", keras_apply)
        _before_first_apply.clear()


def _routed(keras_apply: Callable[..., Any], through: Through) -> Callable[..., Any]:
    @functools.wraps(keras_apply)
    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        if _applying[0]:
            return keras_apply(self, grads, trainable_variables)
        _applying[0] = True
        try:
            if not any(seen is self for seen in _applied):
                _applied.append(self)
                action = _before_first_apply.pop(id(self), None)
                if action is not None:
                    action(self, trainable_variables)
            return through(self, keras_apply, grads, trainable_variables)
        finally:
            _applying[0] = False

    return apply
