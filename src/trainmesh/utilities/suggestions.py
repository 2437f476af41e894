"""'Did you mean ...?' for a mistyped setting: the closest known spelling, when one is close.

A mistyped strategy (``"dpp"``) or Trainer argument (``max_epoch=5``) is refused anyway; naming
the spelling that was probably meant saves the reader a look at the list of choices.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def did_you_mean(name: object, known: Iterable[object]) -> str:
    """``" Did you mean 'ddp'?"`` for the closest of ``known``, or ``""`` when none is close.

    Closest by edits (a swapped pair of letters counts one), then by the first letter and the
    length kept: a typo rarely changes the first letter, so "dpp" means "ddp" rather than "pp".

    >>> did_you_mean("dpp", ["ddp", "fsdp", "pp", "single"])
    " Did you mean 'ddp'?"
    >>> did_you_mean("bogus", ["ddp", "fsdp"])
    ''
    """
    typed = str(name).lower()
    scored = []
    for choice in known:
        distance = _edits(typed, str(choice).lower())
        if distance <= max(1, len(typed) // 3):
            scored.append(
                (distance, typed[:1] != str(choice)[:1].lower(), abs(len(typed) - len(str(choice))), str(choice))
            )
    return f" Did you mean {min(scored)[-1]!r}?" if scored else ""


def _edits(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours that turn ``a`` into ``b``."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, other in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def suggest_unknown_keywords(init: _F, removed: Mapping[str, str] | None = None) -> _F:
    """Wrap a keyword-only ``__init__`` so that a mistyped keyword is refused with the closest name.

    Python's own TypeError names the unknown keyword only; this adds the argument that was probably
    meant, or for a name ``removed`` lists (an argument an older release took) what to write instead.
    The signature stays the wrapped one (``inspect.signature`` follows ``__wrapped__``).
    """
    removed = removed or {}
    parameters = inspect.signature(init).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return init  # any keyword is accepted: nothing to check
    known = [name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        for keyword in kwargs:
            if keyword not in parameters:
                hint = f" {removed[keyword]}" if keyword in removed else did_you_mean(keyword, known[1:])
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {keyword!r}.{hint}")
        return init(self, *args, **kwargs)

    return checked  # type: ignore[return-value]
