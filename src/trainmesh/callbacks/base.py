"""The callback interface: hooks the Trainer calls, each a no-op unless overridden.

A callback written for Lightning by another library (an HPO library's pruning callback subclasses
``lightning.pytorch.Callback``, not this class) is taken by its methods: ``defines_hook`` says which
hooks such an object defines, and the Trainer calls only those.
"""

from __future__ import annotations

import dis
from collections.abc import Iterable
from typing import Any

from trainmesh.trainer_view import TrainerView


class Callback:
    """Extend the training loop without touching the Module.

    Override only the hooks you need; the Trainer calls a hook only on the callbacks that
    override it, so unused hooks cost nothing in the training step. The hooks' parameters have
    Lightning's names (``trainer, pl_module, ...``), so ``super().on_train_start(trainer,
    pl_module=m)`` works as in Lightning; the Trainer passes them by position.

    Examples:
        >>> class PrintEpochs(Callback):
        ...     def on_train_epoch_end(self, trainer, pl_module):
        ...         print("epoch", trainer.current_epoch, "done")
    """

    @property
    def state_key(self) -> str:
        """Key under which this callback's state is stored in a checkpoint."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """Lightning's helper for a ``state_key`` of one's own: the class name and ``kwargs``
        (``MyCallback{'monitor': 'loss'}``), as its docs show callbacks that several instances keep apart."""
        return f"{type(self).__qualname__}{kwargs!r}"

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None: ...
    def teardown(self, trainer: TrainerView, pl_module: Any, stage: str) -> None: ...
    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_fit_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_sanity_check_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_sanity_check_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_train_batch_start(self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...
    # Around the step (trainmesh.trainer.optimization_hooks says when each runs): every backward,
    # then where the optimizer steps (gradients unscaled, not yet clipped), then before zero_grad.
    def on_before_backward(self, trainer: TrainerView, pl_module: Any, loss: Any) -> None: ...
    def on_after_backward(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_before_optimizer_step(self, trainer: TrainerView, pl_module: Any, optimizer: Any) -> None: ...
    def on_before_zero_grad(self, trainer: TrainerView, pl_module: Any, optimizer: Any) -> None: ...
    def on_validation_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_validation_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_validation_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_validation_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_test_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_test_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_test_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_test_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_predict_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_predict_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_predict_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None: ...
    def on_predict_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_exception(self, trainer: TrainerView, pl_module: Any, exception: BaseException) -> None: ...
    def on_save_checkpoint(self, trainer: TrainerView, pl_module: Any, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, trainer: TrainerView, pl_module: Any, checkpoint: dict[str, Any]) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """State to keep in a checkpoint (best scores, counters)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def overrides(obj: Any, hook: str, base: type) -> bool:
    """Whether ``obj``'s class defines ``hook`` differently from ``base``."""
    return getattr(type(obj), hook, None) is not getattr(base, hook, None)


# The hooks of Callback (the Trainer knows more: Lightning 1.x's names, see trainer/lightning1/legacy_hooks.py).
HOOK_NAMES = frozenset(name for name in vars(Callback) if name.startswith("on_") or name in ("setup", "teardown"))


def defines_hook(callback: Any, hook: str) -> bool:
    """Whether ``callback``'s class defines ``hook`` to do something.

    A trainmesh Callback defines what it overrides. Another object (a callback written for
    Lightning: duck typed) defines what its class has as a method, unless that method's body is
    empty: Lightning's own Callback base class gives every hook an empty body, and those are
    neither called nor warned about.

    >>> class Pruning:  # not a trainmesh Callback
    ...     def on_validation_end(self, trainer, module):
    ...         print("report")
    ...     def on_train_start(self, trainer, module):
    ...         pass
    >>> defines_hook(Pruning(), "on_validation_end"), defines_hook(Pruning(), "on_train_start")
    (True, False)
    """
    if isinstance(callback, Callback):
        # A hook set on the instance (LambdaCallback) counts: Lightning calls getattr(callback, hook).
        return hook in vars(callback) or overrides(callback, hook, Callback)
    method = getattr(type(callback), hook, None)
    return callable(method) and not _empty_body(method)


def is_callback_like(obj: Any, names: Iterable[str] = HOOK_NAMES) -> bool:
    """A trainmesh Callback, or an object whose class has a method named as one of the hooks ``names``."""
    return isinstance(obj, Callback) or any(callable(getattr(type(obj), name, None)) for name in names)


def _empty_body(method: Any) -> bool:
    """A function whose body is only a docstring, ``pass`` or ``...``: it returns None and does nothing."""
    code = getattr(method, "__code__", None)
    if code is None:
        return False  # a builtin or a callable object: it may do anything
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("RESUME", "NOP", "CACHE", "RETURN_VALUE"):
            continue
        if instruction.opname in ("LOAD_CONST", "RETURN_CONST") and instruction.argval is None:
            continue
        return False
    return True


def state_key_of(callback: Any) -> str:
    """The key of ``callback``'s state in a checkpoint (a duck-typed callback may have no ``state_key``).
    A ``state_key`` property that raises raises here, as where Lightning reads it: a default in its place
    would save two callbacks' states under one key, and restore one of them from the other's."""
    if not hasattr(type(callback), "state_key"):
        return type(callback).__qualname__
    key = callback.state_key
    return key if isinstance(key, str) else type(callback).__qualname__


def refuse_shared_state_keys(callbacks: Iterable[Any]) -> None:
    """Lightning's check when the Trainer is made: two callbacks with a state (a ``state_dict`` of
    their own) under one ``state_key`` would save one state over the other, and restore both from it."""
    seen: set[str] = set()
    for callback in callbacks:
        if getattr(type(callback), "state_dict", Callback.state_dict) is Callback.state_dict:
            continue
        key = state_key_of(callback)
        if key in seen:
            name = type(callback).__name__
            raise RuntimeError(  # Lightning's words (its _validate_callbacks_list)
                f"Found more than one stateful callback of type `{name}`. In the current configuration, this callback"
                " does not support being saved alongside other instances of the same type. Please consult the"
                f" documentation of `{name}` regarding valid settings for the callback state to be checkpointable."
                " HINT: The `callback.state_key` must be unique among all callbacks in the Trainer."
            )
        seen.add(key)


def callback_states(callbacks: Iterable[Any]) -> dict[str, Any]:
    """Every callback's ``state_dict()`` (those that have one), by :func:`state_key_of`; as Lightning's,
    none for an empty state (a checkpoint lists only the callbacks with something to restore)."""
    states = {state_key_of(cb): cb.state_dict() for cb in callbacks if callable(getattr(cb, "state_dict", None))}
    return {key: state for key, state in states.items() if state}


def load_callback_state(callback: Any, states: dict[str, Any]) -> None:
    """Give ``callback`` its saved state from ``states`` (as :func:`callback_states` wrote them), if any."""
    # Where the callback's key changed, a checkpoint written before holds its state under an older one
    keys = (state_key_of(callback), *getattr(callback, "_legacy_state_keys", ()))
    saved = next((states[key] for key in keys if key in states), None)
    if saved and callable(getattr(callback, "load_state_dict", None)):
        callback.load_state_dict(saved)
