"""``PossibleUserWarning`` (a warning about a setting that may be a mistake) and the switch that hides it."""

from __future__ import annotations

import warnings


class PossibleUserWarning(UserWarning):
    """A setting that is allowed but often a mistake (e.g. few DataLoader workers)."""


def disable_possible_user_warnings(module: str = "") -> None:
    """Hide :class:`PossibleUserWarning` raised from ``module`` (a dotted prefix), or from anywhere."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)
