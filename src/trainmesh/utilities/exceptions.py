"""``MisconfigurationException``: the error for settings that cannot run together, as Lightning names it.

Lightning programs catch it by this name (``from lightning.pytorch.utilities.exceptions import
MisconfigurationException``); trainmesh raises it where Lightning does for a module's configuration.
"""

from __future__ import annotations


class MisconfigurationException(Exception):
    """A Trainer's settings or a module's definition that cannot run, found before the run starts."""


class MisconfiguredValue(MisconfigurationException, ValueError):
    """An argument's value Lightning refuses with ``MisconfigurationException`` (``ModelCheckpoint(mode=)``,
    ``EarlyStopping(mode=)``, ...): caught by either name, as trainmesh raised ``ValueError`` there before."""
