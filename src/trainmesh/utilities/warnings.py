"""``PossibleUserWarning`` (a warning about a setting that may be a mistake), the switch that hides
it, and Lightning's way of showing its own warnings (installed by ``import trainmesh``)."""

from __future__ import annotations

import os
import warnings
from typing import Any

_default_format_warning = warnings.formatwarning
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../trainmesh


class PossibleUserWarning(UserWarning):
    """A setting that is allowed but often a mistake (e.g. few DataLoader workers)."""


def disable_possible_user_warnings(module: str = "") -> None:
    """Hide :class:`PossibleUserWarning` raised from ``module`` (a dotted prefix), or from anywhere."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


def format_warning_as_lightning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: Any = None
) -> str:
    """Lightning's ``warnings.formatwarning`` (``lightning.fabric.utilities.warnings``, set when a
    program imports Lightning): a warning raised in the library's own files is shown as
    ``file:line: message``, without its category and source line; any other as Python shows it.
    Lightning takes a path holding "lightning" for its own; trainmesh's files count here too."""
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE + os.sep) or "lightning" in path:
        return f"{filename}:{lineno}: {message}\n"
    return _default_format_warning(message, category, filename, lineno, line)
