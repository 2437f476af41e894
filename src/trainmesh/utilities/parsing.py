"""Lightning's ``utilities.parsing``: hyperparameter collection helpers and attribute look-ups
that search the module, its ``hparams`` and the attached data module.

>>> class Model:
...     def __init__(self, hparams, *my_args, anykw=42, **my_kwargs):
...         pass
>>> parse_class_init_keys(Model)
('self', 'my_args', 'my_kwargs')
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import types
from argparse import Namespace
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from trainmesh.utilities.attribute_dict import AttributeDict
from trainmesh.utilities.rank_zero import rank_zero_warn

__all__ = [
    "AttributeDict",
    "clean_namespace",
    "collect_init_args",
    "flatten_dict",
    "get_init_args",
    "is_picklable",
    "lightning_getattr",
    "lightning_hasattr",
    "lightning_setattr",
    "parse_class_init_keys",
    "str_to_bool",
    "str_to_bool_or_int",
    "str_to_bool_or_str",
    "save_hyperparameters",
]


def is_picklable(obj: object) -> bool:
    try:
        pickle.dumps(obj)
        return True
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False


def clean_namespace(hparams: MutableMapping[str, Any]) -> None:
    """Drop (with a warning naming each) the hyperparameters that cannot be pickled."""
    for key in [k for k, v in hparams.items() if not is_picklable(v)]:
        rank_zero_warn(
            f"Attribute '{key}' removed from hparams because it cannot be pickled. You can suppress this warning by"
            f" setting `self.save_hyperparameters(ignore=['{key}'])`.",
        )
        del hparams[key]


def parse_class_init_keys(cls: type) -> tuple[str, str | None, str | None]:
    """The names ``cls.__init__`` gives to ``self``, ``*args`` and ``**kwargs`` (None if absent)."""
    params = list(inspect.signature(cls.__init__).parameters.values())  # type: ignore[misc]
    var_args = next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    var_kwargs = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    return params[0].name, var_args, var_kwargs


def _init_arguments(frame: types.FrameType) -> tuple[Any, dict[str, Any]]:
    """(self, the named arguments) of the ``__init__`` running in ``frame``; (None, {}) elsewhere."""
    local_vars = frame.f_locals
    if "__class__" not in local_vars or frame.f_code.co_name != "__init__":
        return None, {}
    cls = local_vars["__class__"]
    self_name, args_name, kwargs_name = parse_class_init_keys(cls)
    arguments = {name: local_vars[name] for name in inspect.signature(cls.__init__).parameters}
    if kwargs_name:
        arguments.update(arguments.get(kwargs_name, {}))
    excluded = {n for n in (self_name, args_name, kwargs_name) if n} | {"__class__", "frame", "frame_args"}
    return local_vars.get(self_name), {k: v for k, v in arguments.items() if k not in excluded}


def get_init_args(frame: types.FrameType) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` (empty if it is not an ``__init__``)."""
    return _init_arguments(frame)[1]


def collect_init_args(
    frame: types.FrameType, path_args: list[dict[str, Any]], inside: bool = False, classes: tuple[type, ...] = ()
) -> list[dict[str, Any]]:
    """The arguments of each ``__init__`` up the calling chain of constructors, outermost last.

    Walks the frames from ``frame`` outwards while they are ``__init__`` methods (of instances
    of ``classes``, when given), appending each one's arguments to ``path_args``.
    """
    while (caller := frame.f_back) is not None:
        owner, arguments = _init_arguments(frame)
        if "__class__" in frame.f_locals and (not classes or isinstance(owner, classes)):
            path_args.append(arguments)
            frame, inside = caller, True
        elif not inside:
            frame = caller
        else:
            break
    return path_args


def save_hyperparameters(
    obj: Any,
    *args: Any,
    ignore: Sequence[str] | str | None = None,
    frame: types.FrameType | None = None,
    given_hparams: dict[str, Any] | None = None,
) -> None:
    """Lightning's function behind ``obj.save_hyperparameters(...)``: store in ``obj.hparams`` the
    arguments of the ``__init__`` calls running in ``frame`` (the caller's by default) up the chain
    of constructors, or ``given_hparams``, or a dataclass's fields; ``args`` picks some by name or
    gives one dict or Namespace instead, ``ignore`` leaves some out. ``obj`` is a Module, a DataModule
    or another class with trainmesh's hyperparameters (``trainmesh.hyperparameters.HyperparametersMixin``).

    Examples:
        >>> from trainmesh.hyperparameters import HyperparametersMixin
        >>> class Data(HyperparametersMixin):
        ...     def __init__(self, batch_size=32, data_dir="data"):
        ...         super().__init__()  # a constructor in the chain (Lightning finds them by super's cell)
        ...         save_hyperparameters(self, ignore="data_dir")
        >>> Data(batch_size=8).hparams
        "batch_size": 8
    """
    if len(args) == 1 and not isinstance(args[0], str) and not args[0]:
        return  # an empty container, as Lightning
    if frame is None:
        current = inspect.currentframe()
        frame = current.f_back if current is not None else None
    if not isinstance(frame, types.FrameType):
        raise AttributeError("There is no `frame` available while being required.")
    if given_hparams is not None:
        init_args = given_hparams
    elif dataclasses.is_dataclass(obj):
        init_args = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    else:
        init_args = {}
        for local_args in collect_init_args(frame, [], classes=(type(obj),)):
            init_args.update(local_args)
    ignored = {ignore} if isinstance(ignore, str) else {a for a in ignore or () if isinstance(a, str)}
    init_args = {k: v for k, v in init_args.items() if k not in ignored}
    not_names = [arg for arg in args if not isinstance(arg, str)]
    # Lightning's checkpoint "hparams_name": "kwargs" for __init__ arguments (all, where any are left, or
    # named ones), the name of the __init__ argument holding a given dict or Namespace
    if not args:
        chosen: Any = init_args
        name = "kwargs" if init_args else None
    elif len(not_names) == 1:
        chosen = not_names[0]  # one dict or Namespace stands for the arguments
        name = next((k for k, v in init_args.items() if _same_config(v, chosen)), None)
    else:
        missing = [arg for arg in args if isinstance(arg, str) and arg not in init_args]
        if missing:
            raise ValueError(
                f"save_hyperparameters: {missing} are not __init__ arguments; they are {sorted(init_args)}"
            )
        chosen = {arg: init_args[arg] for arg in args if isinstance(arg, str)}
        name = "kwargs"
    # as Lightning's function, the logger switch stays as it is (only obj.save_hyperparameters sets it)
    obj._store_hyperparameters(vars(chosen) if isinstance(chosen, Namespace) else chosen, name, ignored)


def _same_config(value: Any, given: Any) -> bool:
    """Lightning's ``v == hp`` for the argument holding a given dict/Namespace, without comparing tensors."""
    return value is given or (isinstance(value, (Mapping, Namespace)) and value == given)


def _attribute_holders(model: Any, attribute: str) -> list[Any]:
    """The module, its hparams, the data module and its hparams: those that hold ``attribute``."""
    trainer = getattr(model, "_trainer", None)
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    holders: list[Any] = []
    for owner in (model, datamodule):
        if owner is None:
            continue
        if hasattr(owner, attribute):
            holders.append(owner)
        hparams = getattr(owner, "hparams", None)
        if hparams is not None and attribute in hparams:
            holders.append(hparams)
    return holders


def _not_found(attribute: str) -> AttributeError:
    return AttributeError(
        # Lightning's words: its test_parsing.py (and a program) matches on them
        f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict, nor the datamodule."
    )


def lightning_hasattr(model: Any, attribute: str) -> bool:
    return bool(_attribute_holders(model, attribute))


def lightning_getattr(model: Any, attribute: str) -> Any:
    """``attribute`` from the last of the model, its hparams, the data module, its hparams that has it."""
    holders = _attribute_holders(model, attribute)
    if not holders:
        raise _not_found(attribute)
    holder = holders[-1]
    return holder[attribute] if isinstance(holder, dict) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Set ``attribute`` everywhere it is found (what the batch-size and learning-rate tuners change)."""
    holders = _attribute_holders(model, attribute)
    if not holders:
        raise _not_found(attribute)
    for holder in holders:
        if isinstance(holder, dict):
            holder[attribute] = value
        else:
            setattr(holder, attribute, value)


# pytorch-lightning 1.9.5's command-line value parsers (its argparse: utilities/argparse.py) and
# flatten_dict, which 2.0 removed.
def str_to_bool_or_str(value: str) -> bool | str:
    """``"true"``/``"false"`` (and y/yes/t/on/1, n/no/f/off/0, any case) as a bool, anything else as given.

    >>> str_to_bool_or_str("Yes"), str_to_bool_or_str("maybe")
    (True, 'maybe')
    """
    lowered = value.lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False
    return value


def str_to_bool(value: str) -> bool:
    """A truth value as a bool; a ValueError for anything else.

    >>> str_to_bool("off")
    False
    """
    parsed = str_to_bool_or_str(value)
    if not isinstance(parsed, bool):
        raise ValueError(f"invalid truth value {parsed}")
    return parsed


def str_to_bool_or_int(value: str) -> bool | int | str:
    """A truth value as a bool, else an integer as an int, else the text.

    >>> str_to_bool_or_int("3"), str_to_bool_or_int("no"), str_to_bool_or_int("x")
    (3, False, 'x')
    """
    parsed = str_to_bool_or_str(value)
    if isinstance(parsed, bool):
        return parsed
    try:
        return int(parsed)
    except ValueError:
        return parsed


def flatten_dict(source: dict[str, Any], result: dict[str, Any] | None = None) -> dict[str, Any]:
    """The leaves of nested dicts in one dict, keyed by their own key (a later leaf wins), as 1.9.5's.

    >>> flatten_dict({"a": {"b": 1, "c": {"d": 2}}, "e": 3})
    {'b': 1, 'd': 2, 'e': 3}
    """
    result = {} if result is None else result
    for key, value in source.items():
        if isinstance(value, dict):
            flatten_dict(value, result)
        else:
            result[key] = value
    return result
