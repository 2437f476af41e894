"""How the Trainer's constructor reads its arguments as Lightning's does, outermost first: an
argument not passed is taken from the environment (``PL_TRAINER_MAX_STEPS=7``, Lightning's
``_defaults_from_env_vars``), a mistyped keyword is refused with the closest name
(``Trainer(max_epoch=5)``: "Did you mean 'max_epochs'?"), and ``barebones=True`` refuses what
Lightning refuses with it and turns its features off (barebones.py)."""

from __future__ import annotations

import functools
import inspect
import os
from ast import literal_eval
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from trainmesh.trainer.barebones import barebones_arguments
from trainmesh.utilities.suggestions import suggest_unknown_keywords


def lightning_arguments(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` wrapped by the three, the environment's defaults outermost (as Lightning's decorator is)."""
    return _defaults_from_environment(suggest_unknown_keywords(barebones_arguments(init)))


def _defaults_from_environment(init: Callable[..., None]) -> Callable[..., None]:
    names = [name for name in inspect.signature(init).parameters if name != "self"]

    @functools.wraps(init)
    def with_environment_defaults(self: Any, *args: Any, **kwargs: Any) -> None:
        # PL_<CLASS>_<ARGUMENT>, the class's own name (a subclass reads its own), each read as a Python
        # literal where it is one ("False", "7", "0.5"), else as the string; an argument passed wins
        prefix = f"PL_{type(self).__name__.upper()}_"
        found: dict[str, Any] = {}
        for name in names:
            value: Any = os.environ.get(prefix + name.upper())
            if value:
                with suppress(ValueError, SyntaxError):
                    value = literal_eval(value)
                found[name] = value
        init(self, *args, **{**found, **kwargs})

    return with_environment_defaults
