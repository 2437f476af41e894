"""Lightning names that cannot work here (TPU, IPU, HPU, DeepSpeed without its package, ...): each
exists under its Lightning name, so that a ported import succeeds, and stops when it is used with
what, why and what to use instead.

The reason is held on the class (``__refused__``), so that the inventory of Lightning's API
(``docs/lightning-api.md``) lists the name as refused with the same reason the user sees.

>>> XLAAccelerator = refused_class("XLAAccelerator", "TPUs need torch_xla; use accelerator='cpu' or 'cuda'")
>>> XLAAccelerator()
Traceback (most recent call last):
...
trainmesh.utilities.refusal.RefusedError: XLAAccelerator: TPUs need torch_xla; use accelerator='cpu' or 'cuda'
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any


class RefusedError(NotImplementedError):
    """A Lightning name trainmesh has on purpose but cannot run; the message says why and what instead."""


def refused_class(name: str, reason: str, *, module: str | None = None, members: dict[str, Any] | None = None) -> type:
    """A class named ``name`` whose construction raises :class:`RefusedError` with ``reason``
    (``members``: class-level names the owner's class answers without an instance, as its own)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RefusedError(f"{name}: {reason}")

    namespace = {**(members or {}), "__init__": __init__, "__refused__": reason, "__doc__": f"Refused: {reason}"}
    if module is not None:
        namespace["__module__"] = module
    return type(name, (), namespace)


def refusal_of(obj: object) -> str | None:
    """The reason ``obj`` (a class made by :func:`refused_class`, or any object carrying
    ``__refused__``) is refused; None for a name that works."""
    reason = getattr(obj, "__refused__", None)
    return reason if isinstance(reason, str) else None


class LightningOneName(FutureWarning):
    """A Lightning 1.x name was used; the message gives today's."""


def renamed_class(
    old: str, new: str, make: Callable[..., Any], *, module: str | None = None, doc: str | None = None
) -> type:
    """A class named ``old`` (a Lightning 1.x name) whose construction warns with today's spelling
    ``new`` and returns ``make(*args, **kwargs)``, today's object; ``doc`` is its docstring (by
    default one line naming ``new``)."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is Lightning 1.x's name; today: {new}", LightningOneName, stacklevel=2)
        return make(*args, **kwargs)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        """Never called (``__new__`` returns today's object); it carries ``make``'s parameters, so that
        ``inspect.signature`` of the old name shows what it takes."""

    try:
        taken = inspect.signature(make)
        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        __init__.__signature__ = taken.replace(parameters=[self_parameter, *taken.parameters.values()])  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # a callable without a signature to read: (*args, **kwargs)
        pass
    namespace: dict[str, Any] = {
        "__new__": __new__,
        "__init__": __init__,
        "__doc__": doc or f"Lightning 1.x's name; today: {new}.",
    }
    if module is not None:
        namespace["__module__"] = module
    return type(old, (), namespace)
