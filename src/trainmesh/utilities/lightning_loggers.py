"""A Lightning program's settings of Lightning's loggers, applied to trainmesh's info lines.

Lightning says what it does ("Metric val_loss improved. ...", "`Trainer.fit` stopped: ...") through
the logging module, from loggers named after its modules (``lightning.pytorch.callbacks.early_stopping``;
``pytorch_lightning.…`` for the older package), and programs tune it there:
``logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)`` silences it, a handler added to
``lightning.pytorch`` receives its lines. trainmesh's lines come from loggers under ``trainmesh``
named as Lightning's modules are (``trainmesh.callbacks.early_stopping``), but the logging module
knows loggers by name only: a setting on Lightning's names would never reach them, and a program
silenced under Lightning would not be under trainmesh. The filter here applies those settings as
Lightning's hierarchy would have, for the same names:

* a level: the nearest of ``<top>.<module path>`` … ``<top>`` (``top``: ``lightning.pytorch`` or
  ``pytorch_lightning``) with a level set decides, as ``getEffectiveLevel`` would; the walk stops at
  ``<top>``, which Lightning sets to INFO when imported, so ``lightning``'s own level (and root's)
  changes nothing, as under Lightning;
* ``disabled``: on the line's own logger name only, as ``disabled`` works;
* handlers a program added to those loggers receive the line (besides trainmesh's own stderr
  handler or root's), up to the first that does not propagate; not where the real Lightning is
  imported too (a test running both): then those handlers are Lightning's and serve its lines.

Only what a program set is consulted: nothing in trainmesh touches these names, and loggers a
program never asked for are not created here. A level left NOTSET reads as Lightning's INFO.
Both families are consulted whichever name the program imported: a notebook that ported from
``pytorch_lightning`` to trainmesh keeps its ``getLogger("pytorch_lightning").setLevel(...)`` line.
"""

from __future__ import annotations

import logging
import sys

LIGHTNING_TOPS = ("lightning.pytorch", "pytorch_lightning")
# Lightning Fabric's lines ("Seed set to N" from lightning.fabric.utilities.seed, which Lightning's
# seed_everything is too) are governed by the ``lightning.fabric`` family (``lightning_fabric`` for 1.9's)
FABRIC_TOPS = ("lightning.fabric", "lightning_fabric")


class LightningLoggerSettings(logging.Filter):
    """Let a ``trainmesh.<path>`` record through as Lightning's ``<top>.<path>`` loggers would.

    Examples:
        >>> import logging
        >>> record = logging.LogRecord("trainmesh.callbacks.timer", logging.INFO, "", 0, "hi", None, None)
        >>> LightningLoggerSettings().filter(record)
        True
        >>> logging.getLogger("lightning.pytorch.callbacks").setLevel(logging.ERROR)
        >>> LightningLoggerSettings().filter(record)
        False
        >>> logging.getLogger("lightning.pytorch.callbacks").setLevel(logging.NOTSET)
    """

    def __init__(self, tops: tuple[str, ...] = LIGHTNING_TOPS) -> None:
        super().__init__()
        self.tops = tops

    def filter(self, record: logging.LogRecord) -> bool:
        path = record.name.split(".")[1:] if record.name.startswith("trainmesh.") else []
        existing = logging.Logger.manager.loggerDict
        for top in self.tops:
            names = [".".join([top, *path[:depth]]) for depth in range(len(path), -1, -1)]
            loggers = [logger for name in names if isinstance(logger := existing.get(name), logging.Logger)]
            own = existing.get(names[0])
            if isinstance(own, logging.Logger) and own.disabled:
                return False
            level = next((logger.level for logger in loggers if logger.level != logging.NOTSET), logging.INFO)
            if record.levelno < level:
                return False
            if _is_lightning_itself(top):
                continue  # its handlers serve Lightning's own lines, in a process that imported both
            for logger in loggers:
                for handler in logger.handlers:
                    if record.levelno >= handler.level:
                        handler.handle(record)
                if not logger.propagate:
                    break
        return True


def _is_lightning_itself(top: str) -> bool:
    module = sys.modules.get(top)
    return module is not None and not module.__name__.startswith("trainmesh")


_SETTINGS: dict[tuple[str, ...], LightningLoggerSettings] = {
    tops: LightningLoggerSettings(tops) for tops in (LIGHTNING_TOPS, FABRIC_TOPS)
}


def lightning_named_logger(name: str, *, tops: tuple[str, ...] = LIGHTNING_TOPS) -> logging.Logger:
    """``logging.getLogger(name)`` for one of trainmesh's modules whose lines are Lightning's, with the
    filter above, so a program's settings of Lightning's loggers (``tops``: Fabric's family for a line
    Lightning logs from ``lightning.fabric``) govern them.

    >>> lightning_named_logger("trainmesh.callbacks.timer").name
    'trainmesh.callbacks.timer'
    """
    logger = logging.getLogger(name)
    if _SETTINGS[tops] not in logger.filters:
        logger.addFilter(_SETTINGS[tops])
    return logger
