"""``LambdaCallback``: a callback made of functions given by hook name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmesh.callbacks.base import HOOK_NAMES, Callback


class LambdaCallback(Callback):
    """A callback whose hooks are the functions passed by their names; the others do nothing.

    Each function takes the hook's arguments (``trainer, module, ...``).

    Examples:
        >>> import trainmesh as tm
        >>> trainer = tm.Trainer(callbacks=[LambdaCallback(on_train_start=lambda trainer, module: print("go"))])
    """

    def __init__(self, **hooks: Callable[..., Any] | None) -> None:
        unknown = sorted(set(hooks) - HOOK_NAMES)
        if unknown:
            raise TypeError(f"LambdaCallback: {unknown} are not callback hooks; the hooks are {sorted(HOOK_NAMES)}")
        for name, function in hooks.items():
            if function is not None:
                # The instance's own attribute: the Trainer sees it as a hook this callback defines.
                setattr(self, name, function)
