"""``MisconfigurationException``: the error for settings that cannot run together, as Lightning names it.

Lightning programs catch it by this name (``from lightning.pytorch.utilities.exceptions import
MisconfigurationException``); trainmesh raises it where Lightning does for a module's configuration.
"""

from __future__ import annotations

from typing import Any


class MisconfigurationException(Exception):
    """A Trainer's settings or a module's definition that cannot run, found before the run starts."""


class SIGTERMException(SystemExit):
    """Lightning's exception for a run ended by SIGTERM: a ``SystemExit``. trainmesh's own end of a
    run on a stop signal (``supervision.preemption.Preempted``, exit status 75 after its checkpoint
    is saved) is one, so a program that catches this catches that too."""


class MisconfiguredValue(MisconfigurationException, ValueError):
    """An argument's value Lightning refuses with ``MisconfigurationException`` (``ModelCheckpoint(mode=)``,
    ``EarlyStopping(mode=)``, ...): caught by either name, as trainmesh raised ``ValueError`` there before."""


class MisconfiguredType(MisconfigurationException, TypeError):
    """An argument of a type Lightning refuses with ``MisconfigurationException`` (``Trainer(plugins=[...])``
    with an object no plugin type matches): caught by either name, as trainmesh raised ``TypeError`` there before."""


class MissingModel(TypeError, ValueError):
    """``trainer.validate/test/predict()`` without a model where no earlier run gave one: Lightning's
    ``TypeError``, and the ``ValueError`` trainmesh raised before, so either ``except`` catches it."""


class TrainingSpikeException(RuntimeError):
    """Raised when a loss spike was detected (by the Trainer side's or Fabric's ``SpikeDetection``)."""

    def __init__(self, batch_idx: int, *args: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args)
