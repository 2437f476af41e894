"""pytorch-lightning 1.9.5's ``utilities.argparse``: a class's constructor as command-line options
(``add_argparse_args``), the parsed values back (``parse_argparser``, ``from_argparse_args``), its
arguments' types (``get_init_arguments_and_types``) and ``PL_<CLASS>_<ARGUMENT>`` environment variables
(``parse_env_variables``), which 2.0 removed for ``LightningCLI``. ``LightningDataModule``'s argparse
classmethods are these; each option is parsed as 1.9.5 parses it (recorded in
``tests/helpers/lightning_1_9_trainer.json``). The Trainer's own options are
``trainer/lightning1/argparse_arguments.py``'s (1.9.5's per-argument table).

>>> import argparse
>>> class Data:
...     def __init__(self, batch_size: int = 32, shuffle: bool = True) -> None:
...         self.batch_size, self.shuffle = batch_size, shuffle
>>> parser = add_argparse_args(Data, argparse.ArgumentParser())
>>> data = from_argparse_args(Data, parser.parse_args(["--batch_size", "8", "--shuffle", "no"]))
>>> data.batch_size, data.shuffle
(8, False)
"""

from __future__ import annotations

import inspect
import os
from argparse import ArgumentParser, Namespace, _ArgumentGroup
from ast import literal_eval
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from trainmesh.utilities.parsing import str_to_bool, str_to_bool_or_int, str_to_bool_or_str

__all__ = [
    "add_argparse_args",
    "from_argparse_args",
    "get_init_arguments_and_types",
    "parse_argparser",
    "parse_env_variables",
]

_ALLOWED_TYPES = (str, int, float, bool)


def from_argparse_args(cls: Any, args: ArgumentParser | Namespace, **kwargs: Any) -> Any:
    """``cls(...)`` from the parsed arguments that are its constructor's (the rest are the program's),
    ``kwargs`` over them."""
    if isinstance(args, ArgumentParser):
        args = cls.parse_argparser(args) if hasattr(cls, "parse_argparser") else parse_argparser(cls, args)
    params = vars(args)
    valid = inspect.signature(cls.__init__).parameters
    return cls(**{**{name: params[name] for name in valid if name in params}, **kwargs})


def parse_argparser(cls: Any, arg_parser: ArgumentParser | Namespace) -> Namespace:
    """The parsed command line; a bool option given without a value (``--flag``) is True."""
    args = arg_parser.parse_args() if isinstance(arg_parser, ArgumentParser) else arg_parser
    types_default = {name: (types, default) for name, types, default in get_init_arguments_and_types(cls)}
    parsed = {}
    for key, value in vars(args).items():
        if key in types_default and value is None:
            types, default = types_default[key]
            if bool in types and isinstance(default, bool):
                value = True
        parsed[key] = value
    return Namespace(**parsed)


def get_init_arguments_and_types(cls: Any) -> list[tuple[str, tuple[Any, ...], Any]]:
    """(name, the types its annotation names, default) of each constructor argument (1.9.5's reading:
    an annotation written as a string, under ``from __future__ import annotations``, names no type)."""
    found = []
    for name, parameter in inspect.signature(cls).parameters.items():
        annotation = parameter.annotation
        try:
            if type(annotation).__name__ == "_LiteralGenericAlias":
                types: tuple[Any, ...] = tuple({type(a) for a in annotation.__args__})
            elif "typing.Literal" in str(annotation) or "typing_extensions.Literal" in str(annotation):
                types = tuple({type(a) for union in annotation.__args__ for a in union.__args__})
            else:
                types = tuple(annotation.__args__)
        except (AttributeError, TypeError):
            types = (annotation,)
        found.append((name, types, parameter.default))
    return found


def _parser_of(types: tuple[Any, ...]) -> tuple[Callable[[str], Any], dict[str, Any]]:
    """How 1.9.5 parses an option of these types, and the ``nargs="?"`` of a bool option."""
    if bool in types:
        if len(types) == 1:
            return str_to_bool, {"nargs": "?", "const": True}
        if int in types:
            return str_to_bool_or_int, {"nargs": "?", "const": True}
        if str in types:
            return str_to_bool_or_str, {"nargs": "?", "const": True}
        return next(t for t in types if t is not bool), {"nargs": "?", "const": True}
    if len(types) == 2 and set(types) == {int, float}:
        return _int_or_float_type, {}
    return types[0], {}


def _int_or_float_type(value: int | float | str) -> int | float:
    return float(value) if "." in str(value) else int(value)


def add_argparse_args(cls: Any, parent_parser: ArgumentParser, *, use_argument_group: bool = True) -> Any:
    """``parent_parser`` with a ``--name`` option for each constructor argument of type str, int,
    float or bool (in a group named after the class; ``use_argument_group=False``: a new parser)."""
    if isinstance(parent_parser, _ArgumentGroup):
        raise RuntimeError("Please only pass an `ArgumentParser` instance.")
    parser: Any = (
        parent_parser.add_argument_group(f"{cls.__module__}.{cls.__qualname__}")
        if use_argument_group
        else ArgumentParser(parents=[parent_parser], add_help=False)
    )
    arguments: list[tuple[str, tuple[Any, ...], Any]] = []
    for symbol in (cls, cls.__init__):
        arguments = [a for a in get_init_arguments_and_types(symbol) if a[0] not in ("self", "args", "kwargs")]
        if arguments:
            break
    for name, types, default in arguments:
        types = tuple(t for t in _ALLOWED_TYPES if t in types)
        if not types:
            continue  # 1.9.5 leaves out an argument of another type
        parse, flag = _parser_of(types)
        parser.add_argument(
            f"--{name}", dest=name, default=default, type=parse, required=default is inspect.Parameter.empty, **flag
        )
    return parent_parser if use_argument_group else parser


def parse_env_variables(cls: Any, template: str = "PL_%(cls_name)s_%(cls_argument)s") -> Namespace:
    """The constructor's arguments set in the environment (``PL_TRAINER_MAX_EPOCHS=3``), each read as a
    Python literal where it is one."""
    found = {}
    for name, _, _ in get_init_arguments_and_types(cls):
        value: Any = os.environ.get(template % {"cls_name": cls.__name__.upper(), "cls_argument": name.upper()})
        if value:
            with suppress(Exception):
                value = literal_eval(value)
            found[name] = value
    return Namespace(**found)
