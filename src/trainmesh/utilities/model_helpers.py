"""Lightning's ``utilities.model_helpers``: ``is_overridden`` (whether an object's class replaces a
hook of its trainmesh base class), ``get_torchvision_model`` and ``_restricted_classmethod``, as
Lightning 2.6 defines them.

>>> import trainmesh as tm
>>> class Net(tm.Module):
...     def training_step(self, batch, batch_idx):
...         return None
>>> is_overridden("training_step", Net()), is_overridden("on_fit_start", Net())
(True, False)
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from unittest.mock import Mock

from torch import nn

# The bases whose hooks a program may override, by where they are defined: this low layer does
# not import the Module, DataModule or Callback modules (they are above it), so it finds the base
# among the instance's classes, the first of these in its method resolution order.
_BASES = {
    ("trainmesh.module", "Module"),
    ("trainmesh.datamodule", "DataModule"),
    ("trainmesh.callbacks.base", "Callback"),
}


def _trainmesh_base(instance: object) -> type | None:
    return next((cls for cls in type(instance).__mro__ if (cls.__module__, cls.__qualname__) in _BASES), None)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance`` implements ``method_name`` differently from ``parent`` (by default its
    trainmesh Module, DataModule or Callback base). ``instance`` None: False. A function wrapped with
    ``functools.wraps``, a ``Mock(wraps=...)`` and a ``functools.partial`` count as what they wrap.
    """
    if instance is None:
        return False  # Lightning's: `self.lightning_module` may be None
    if parent is None:
        parent = _trainmesh_base(instance)
        if parent is None:
            raise ValueError("Expected a parent")
    instance_attr: Any = getattr(instance, method_name, None)
    if instance_attr is None:
        return False
    if hasattr(instance_attr, "__wrapped__"):
        instance_attr = instance_attr.__wrapped__
    if isinstance(instance_attr, Mock):
        instance_attr = instance_attr._mock_wraps
    elif isinstance(instance_attr, functools.partial):
        instance_attr = instance_attr.func
    if instance_attr is None:
        return False
    parent_attr: Any = getattr(parent, method_name, None)
    if parent_attr is None:
        raise ValueError("The parent should define the method")
    if hasattr(parent_attr, "__wrapped__"):
        parent_attr = parent_attr.__wrapped__
    return bool(instance_attr.__code__ != parent_attr.__code__)


def get_torchvision_model(model_name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(model_name, **kwargs)``; torchvision must be installed."""
    try:
        from torchvision import models  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "get_torchvision_model needs torchvision, which is not installed: `pip install torchvision`"
        ) from error
    model: nn.Module = models.get_model(model_name, **kwargs)
    return model


class _RestrictedClassmethod(classmethod):
    """A classmethod that raises Lightning 2.6's TypeError when called on an instance.

    ``model.load_from_checkpoint(path)`` returns a new model and leaves ``model`` as it was: a
    program that discards the result goes on with the weights it had (a cross-validation script
    scoring its last weights as the best checkpoint's). Lightning refuses the call; so do we. Inside
    ``torch.jit`` scripting the call goes through, as Lightning lets it (its pytorch#67146 workaround).
    """

    def __init__(self, method: Callable[..., Any]) -> None:
        super().__init__(method)
        self.method = method

    def __get__(self, instance: Any, owner: type | None = None) -> Callable[..., Any]:
        method = self.method

        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            cls = owner if owner is not None else type(instance)
            if instance is not None and not _in_jit_scripting():
                raise TypeError(
                    f"The classmethod `{cls.__name__}.{method.__name__}` cannot be called on an instance."
                    " Please call it on the class type and make sure the return value is used."
                )
            return method(cls, *args, **kwargs)

        wrapper.__func__ = method  # type: ignore[attr-defined]
        return wrapper


# Lightning's name. To a type checker it is the classmethod it is on the class (the methods' ``cls``
# typed as the class); at run time, the one that refuses an instance.
if TYPE_CHECKING:
    _restricted_classmethod = classmethod
else:
    _restricted_classmethod = _RestrictedClassmethod


def _in_jit_scripting() -> bool:
    return any(os.path.join("torch", "jit") in frame.filename for frame in inspect.stack())
