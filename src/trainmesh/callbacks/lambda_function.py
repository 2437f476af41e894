"""``LambdaCallback``: a callback made of functions given by hook name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmesh.callbacks.base import HOOK_NAMES, Callback

Hook = Callable[..., Any] | None
_LIGHTNING_HOOKS = (
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_train_start",
    "on_train_end",
    "on_validation_start",
    "on_validation_end",
    "on_test_start",
    "on_test_end",
    "on_exception",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_predict_start",
    "on_predict_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
)


class LambdaCallback(Callback):
    """A callback whose hooks are the functions passed by their names; the others do nothing.

    Each function takes the hook's arguments (``trainer, pl_module, ...``). Lightning's hooks are
    parameters in Lightning's order; the other hooks trainmesh calls come by name in ``hooks``.

    Args:
        setup: the function run as the ``setup`` hook (default ``None``).
        teardown: the function run as the ``teardown`` hook (default ``None``).
        on_fit_start: the function run as the ``on_fit_start`` hook (default ``None``).
        on_fit_end: the function run as the ``on_fit_end`` hook (default ``None``).
        on_sanity_check_start: the function run as the ``on_sanity_check_start`` hook (default ``None``).
        on_sanity_check_end: the function run as the ``on_sanity_check_end`` hook (default ``None``).
        on_train_batch_start: the function run as the ``on_train_batch_start`` hook (default ``None``).
        on_train_batch_end: the function run as the ``on_train_batch_end`` hook (default ``None``).
        on_train_epoch_start: the function run as the ``on_train_epoch_start`` hook (default ``None``).
        on_train_epoch_end: the function run as the ``on_train_epoch_end`` hook (default ``None``).
        on_validation_epoch_start: the function run as the ``on_validation_epoch_start`` hook (default ``None``).
        on_validation_epoch_end: the function run as the ``on_validation_epoch_end`` hook (default ``None``).
        on_test_epoch_start: the function run as the ``on_test_epoch_start`` hook (default ``None``).
        on_test_epoch_end: the function run as the ``on_test_epoch_end`` hook (default ``None``).
        on_validation_batch_start: the function run as the ``on_validation_batch_start`` hook (default ``None``).
        on_validation_batch_end: the function run as the ``on_validation_batch_end`` hook (default ``None``).
        on_test_batch_start: the function run as the ``on_test_batch_start`` hook (default ``None``).
        on_test_batch_end: the function run as the ``on_test_batch_end`` hook (default ``None``).
        on_train_start: the function run as the ``on_train_start`` hook (default ``None``).
        on_train_end: the function run as the ``on_train_end`` hook (default ``None``).
        on_validation_start: the function run as the ``on_validation_start`` hook (default ``None``).
        on_validation_end: the function run as the ``on_validation_end`` hook (default ``None``).
        on_test_start: the function run as the ``on_test_start`` hook (default ``None``).
        on_test_end: the function run as the ``on_test_end`` hook (default ``None``).
        on_exception: the function run as the ``on_exception`` hook (default ``None``).
        on_save_checkpoint: the function run as the ``on_save_checkpoint`` hook (default ``None``).
        on_load_checkpoint: the function run as the ``on_load_checkpoint`` hook (default ``None``).
        on_before_backward: the function run as the ``on_before_backward`` hook (default ``None``).
        on_after_backward: the function run as the ``on_after_backward`` hook (default ``None``).
        on_before_optimizer_step: the function run as the ``on_before_optimizer_step`` hook (default ``None``).
        on_before_zero_grad: the function run as the ``on_before_zero_grad`` hook (default ``None``).
        on_predict_start: the function run as the ``on_predict_start`` hook (default ``None``).
        on_predict_end: the function run as the ``on_predict_end`` hook (default ``None``).
        on_predict_batch_start: the function run as the ``on_predict_batch_start`` hook (default ``None``).
        on_predict_batch_end: the function run as the ``on_predict_batch_end`` hook (default ``None``).
        on_predict_epoch_start: the function run as the ``on_predict_epoch_start`` hook (default ``None``).
        on_predict_epoch_end: the function run as the ``on_predict_epoch_end`` hook (default ``None``).
        **hooks: other hooks trainmesh calls (Lightning 1.x's), by name.

    Examples:
        >>> import trainmesh as tm
        >>> trainer = tm.Trainer(callbacks=[LambdaCallback(on_train_start=lambda trainer, module: print("go"))])
    """

    def __init__(
        self,
        setup: Hook = None,
        teardown: Hook = None,
        on_fit_start: Hook = None,
        on_fit_end: Hook = None,
        on_sanity_check_start: Hook = None,
        on_sanity_check_end: Hook = None,
        on_train_batch_start: Hook = None,
        on_train_batch_end: Hook = None,
        on_train_epoch_start: Hook = None,
        on_train_epoch_end: Hook = None,
        on_validation_epoch_start: Hook = None,
        on_validation_epoch_end: Hook = None,
        on_test_epoch_start: Hook = None,
        on_test_epoch_end: Hook = None,
        on_validation_batch_start: Hook = None,
        on_validation_batch_end: Hook = None,
        on_test_batch_start: Hook = None,
        on_test_batch_end: Hook = None,
        on_train_start: Hook = None,
        on_train_end: Hook = None,
        on_validation_start: Hook = None,
        on_validation_end: Hook = None,
        on_test_start: Hook = None,
        on_test_end: Hook = None,
        on_exception: Hook = None,
        on_save_checkpoint: Hook = None,
        on_load_checkpoint: Hook = None,
        on_before_backward: Hook = None,
        on_after_backward: Hook = None,
        on_before_optimizer_step: Hook = None,
        on_before_zero_grad: Hook = None,
        on_predict_start: Hook = None,
        on_predict_end: Hook = None,
        on_predict_batch_start: Hook = None,
        on_predict_batch_end: Hook = None,
        on_predict_epoch_start: Hook = None,
        on_predict_epoch_end: Hook = None,
        **hooks: Hook,
    ) -> None:
        # Lightning's hook names are parameters in Lightning's order (a program may pass them by
        # name or, as Lightning allows, by position); other hooks trainmesh calls come by name.
        given = {name: value for name, value in locals().items() if name in _LIGHTNING_HOOKS}
        hooks = {**given, **hooks}
        unknown = sorted(set(hooks) - HOOK_NAMES)
        if unknown:
            raise TypeError(f"LambdaCallback: {unknown} are not callback hooks; the hooks are {sorted(HOOK_NAMES)}")
        for name, function in hooks.items():
            if function is not None:
                # The instance's own attribute: the Trainer sees it as a hook this callback defines.
                setattr(self, name, function)
