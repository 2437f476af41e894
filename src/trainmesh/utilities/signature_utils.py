"""Lightning's ``utilities.signature_utils`` (in 1.x and 2.6): whether a hook takes a parameter.
Published callbacks import it (lightning-bolts' verification callbacks ask whether a module's
``transfer_batch_to_device`` takes ``dataloader_idx``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["is_param_in_hook_signature"]


def is_param_in_hook_signature(
    hook_fx: Callable[..., Any], param: str, explicit: bool = False, min_args: int | None = None
) -> bool:
    """Whether ``hook_fx`` (a method: its first parameter is skipped) takes ``param``, as
    Lightning 2.6 answers.

    Args:
        hook_fx: the hook (a decorated one is read through ``__wrapped__``).
        param: the parameter's name.
        explicit: True: only a parameter of that name counts, not ``*args``.
        min_args: also True when the hook has at least this many parameters.

    Examples:
        >>> class M:
        ...     def hook(self, batch, dataloader_idx): ...
        >>> is_param_in_hook_signature(M().hook, "dataloader_idx")
        True
    """
    hook_fx = getattr(hook_fx, "__wrapped__", hook_fx)
    spec = inspect.getfullargspec(hook_fx)
    args = spec.args[1:]  # without `self`
    return (
        param in args
        or (not explicit and spec.varargs is not None)
        or (isinstance(min_args, int) and len(args) >= min_args)
    )
