"""A wrapper that is also the user's object: Lightning's way of wrapping an optimizer.

Lightning's ``LightningOptimizer`` changes one call (``step``) and must still be the user's
optimizer to anyone who asks (``isinstance(opt, torch.optim.Adam)``, a custom optimizer's own
methods, ``param_groups`` written for a warm-up). Lightning makes the wrapper's class a subclass of
both the wrapper and the user's class (``type("Lightning" + name, (LightningOptimizer, cls), {})``)
and copies the optimizer's ``__dict__`` (1.9) or hands other attributes on through ``__getattr__``
(2.x). Here the wrapper shares the very ``__dict__`` of the user's object: reading or writing
``wrapper.x`` is reading or writing ``user_object.x`` (a rebinding write such as
``load_state_dict``'s ``self.__dict__.update`` included), with no ``__getattr__`` and no copy going
stale. The wrapper keeps its own state in ``__slots__``, which the shared ``__dict__`` cannot shadow.

Its changed calls must be data descriptors (``slot_method``): torch's learning-rate schedulers write
``optimizer.step = counting_wrapper`` into the optimizer's ``__dict__``, and an entry there would
otherwise hide a plain method of the wrapper (the step would bypass the wrapper).
"""

from __future__ import annotations

import operator
from typing import Any, TypeVar

W = TypeVar("W")


class _SlotMethod(property):
    # torch's Optimizer._patch_step_function (run by load_state_dict's __setstate__) profiles
    # ``type(self).step`` unless it says ``hooked``: the user's own step, which the wrapper calls,
    # is profiled already, so its hooks must not run twice (nor the descriptor be replaced).
    hooked = True


def slot_method(slot: str) -> Any:
    """A class attribute that reads the bound method kept in ``slot`` (a C-level read: no Python
    call per access) and that a write (a scheduler's ``opt.step = wrapper(opt.step)``) replaces in
    the wrapper's slot, never in the user's ``__dict__``.

    Args:
        slot: the name of the ``__slots__`` entry holding the method.

    Examples:
        >>> class Counter:
        ...     __slots__ = ("_tm_step",)
        ...     step = slot_method("_tm_step")
        >>> c = Counter()
        >>> c._tm_step = lambda: 3
        >>> c.step()
        3
    """

    def write(self: Any, value: Any) -> None:
        setattr(self, slot, value)  # the wrapper's own slot

    return _SlotMethod(operator.attrgetter(slot), write)


def sharing_state(wrapper: type[W], user_object: Any) -> W:
    """An uninitialised instance of a class that subclasses ``wrapper`` and ``type(user_object)``,
    whose ``__dict__`` is ``user_object``'s own (the caller fills the wrapper's slots).

    Args:
        wrapper: a class whose own state is all in ``__slots__``.
        user_object: the optimizer or scheduler to stand for.

    Examples:
        >>> import torch
        >>> class Shown:
        ...     __slots__ = ()
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        >>> shown = sharing_state(Shown, opt)
        >>> isinstance(shown, torch.optim.SGD), shown.param_groups is opt.param_groups
        (True, True)
    """
    cls = type(user_object)
    try:
        made: W = object.__new__(_joined(wrapper, cls))
        made.__dict__ = user_object.__dict__  # the same dict object: one state, read and written through both
    except (TypeError, AttributeError) as error:  # a class with its own __slots__, or no __dict__
        raise TypeError(
            f"{cls.__qualname__} cannot be wrapped as Lightning wraps an optimizer (a subclass of both the "
            f"wrapper and {cls.__qualname__}, sharing its attributes): {error}. Give {cls.__qualname__} a "
            "__dict__ (no __slots__ of its own), as torch.optim.Optimizer's subclasses have"
        ) from error
    return made


# One class per (wrapper, user class), made once: a wrapper is then as cheap to make as a plain one.
_JOINED: dict[tuple[type, type], type] = {}


def _joined(wrapper: type, cls: type) -> type:
    joined = _JOINED.get((wrapper, cls))
    if joined is None:
        joined = _JOINED[wrapper, cls] = _join(wrapper, cls)
    return joined


def _join(wrapper: type, cls: type) -> type:
    namespace: dict[str, Any] = {"__slots__": (), "__module__": wrapper.__module__}
    if hasattr(cls, "__del__"):  # the user's finalizer belongs to the user's object, not to its wrapper
        namespace["__del__"] = _nothing
    # A wrapper handed to programs takes Lightning's name ("LightningAdam": ``_tm_joined_name``)
    name = getattr(wrapper, "_tm_joined_name", wrapper.__name__ + "[{}]").format(cls.__name__)
    return type(name, (wrapper, cls), namespace)


def _nothing(self: Any) -> None:
    return None
