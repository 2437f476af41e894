"""How to install an optional part of trainmesh, spelled one way in every message.

Each optional feature is an extra of the package (pyproject.toml's ``optional-dependencies``), so
the hint installs the extra, which pins what trainmesh is tested with, rather than the bare
package (tests/utilities/test_install_hints.py checks each extra named here exists).
"""

from __future__ import annotations

# the extras a message may name (pyproject.toml defines each)
EXTRAS = ("fault-tolerance", "keras", "plot", "tensorboard")


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install "trainmesh[keras]"``.

    >>> install_hint("plot")
    'pip install "trainmesh[plot]"'
    """
    if extra not in EXTRAS:
        raise ValueError(f"{extra!r} is not one of trainmesh's extras {EXTRAS}")
    return f'pip install "trainmesh[{extra}]"'
