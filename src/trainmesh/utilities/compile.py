"""Lightning's ``lightning.pytorch.utilities.compile``: ``from_compiled(torch.compile(model))`` gives
back ``model`` to train compiled with the same settings (``Trainer.fit`` also takes the compiled
wrapper itself), and ``to_uncompiled`` undoes either. Nothing is written onto the module: its compile
settings are kept beside it (strategies/compile.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["from_compiled", "to_uncompiled"]


def from_compiled(model: Any) -> Any:
    """The Module inside ``torch.compile(module, ...)``, which ``Trainer.fit`` then trains compiled
    with those settings.

    Args:
        model: what ``torch.compile`` returned for a trainmesh Module.

    Raises:
        ValueError: ``model`` is not a compiled Module.

    Examples:
        >>> from_compiled(object())
        Traceback (most recent call last):
        ...
        ValueError: `model` is required to be a `OptimizedModule`. Found a `object` instead.
    """
    from trainmesh.strategies.compile import from_compiled_module

    return from_compiled_module(model, _module_class(model))


def to_uncompiled(model: Any) -> Any:
    """The Module without compilation, from ``torch.compile(module)`` or from what
    :func:`from_compiled` returned.

    Args:
        model: a compiled wrapper, or a Module :func:`from_compiled` returned.

    Raises:
        ValueError: ``model`` is neither.
    """
    from trainmesh.strategies.compile import to_uncompiled_module

    return to_uncompiled_module(model, _module_class(model))


def _module_class(model: Any) -> type:
    # trainmesh's Module, found among the classes of the model (or of the module it wraps) by name:
    # this layer does not import the Module's (trainmesh/module.py sits above it).
    inner = getattr(model, "_orig_mod", model)
    for cls in type(inner).__mro__:
        if (cls.__module__, cls.__qualname__) == ("trainmesh.module", "Module"):
            return cls
    return _NotAModule


class _NotAModule:
    """Stands for trainmesh's Module where the model has none among its classes: nothing is one."""
