"""``Trainer(barebones=True)``, as Lightning 2.6 defines it: every feature that may slow a step
is off (checkpointing, loggers, the progress bar, the model summary, the sanity check,
``self.log``), and passing one of them, or an opt-in feature (``fast_dev_run``, ``detect_anomaly``,
``profiler``), stops with Lightning's own error.

Lightning tells an argument passed from one left out by its default ``None``; trainmesh's Trainer
keeps its concrete defaults (its argparse face and CLI read them), so the arguments are read here,
as passed, before the Trainer's ``__init__`` fills in its defaults.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from trainmesh.utilities.rank_zero import rank_zero_info

_F = TypeVar("_F", bound=Callable[..., Any])

# (argument, what barebones sets it to, whether a passed value is refused, the error's reason)
_OFF = (
    ("enable_checkpointing", False, bool, "Checkpointing can impact raw speed so it is disabled in barebones mode."),
    ("logger", False, lambda v: v is not None and v is not False, "Logging can impact raw speed so it is disabled in barebones mode."),
    ("enable_progress_bar", False, bool, "The progress bar can impact raw speed so it is disabled in barebones mode."),
    ("log_every_n_steps", 0, lambda v: v is not None and v != 0, "Logging can impact raw speed so it is disabled in barebones mode."),
    ("enable_model_summary", False, bool, "Model summary can impact raw speed so it is disabled in barebones mode."),
    ("num_sanity_val_steps", 0, lambda v: v is not None and v != 0, "Sanity checking can impact raw speed so it is disabled in barebones mode."),
    ("fast_dev_run", False, lambda v: v is not False and v != 0, "Development run is not meant for raw speed evaluation so it is disabled in barebones mode."),
    ("detect_anomaly", False, bool, "Anomaly detection can impact raw speed so it is disabled in barebones mode."),
    ("profiler", None, lambda v: v is not None, "Profiling can impact raw speed so it is disabled in barebones mode."),
)  # fmt: skip
# Lightning 2.6's opt-out defaults: a None passed (a LightningCLI config's null) means the default.
_OPT_OUT = {
    "enable_checkpointing": True,
    "logger": True,
    "enable_progress_bar": True,
    "log_every_n_steps": 50,
    "enable_model_summary": True,
    "num_sanity_val_steps": 2,
}
_DEACTIVATED = (
    " - Checkpointing: `Trainer(enable_checkpointing=True)`",
    " - Progress bar: `Trainer(enable_progress_bar=True)`",
    " - Model summary: `Trainer(enable_model_summary=True)`",
    " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`,"
    " `LightningModule.log(...)`, `LightningModule.log_dict(...)`",
    " - Sanity checking: `Trainer(num_sanity_val_steps>0)`",
    " - Development run: `Trainer(fast_dev_run=True)`",
    " - Anomaly detection: `Trainer(detect_anomaly=True)`",
    " - Profiling: `Trainer(profiler=...)`",
)


def barebones_arguments(init: _F) -> _F:
    """Wrap the Trainer's ``__init__``: with ``barebones=True``, refuse what Lightning refuses and
    pass the switched-off values on; else a ``None`` among ``_OPT_OUT`` is Lightning's default."""

    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("barebones"):
            for name, off, refused, reason in _OFF:
                if name in kwargs and refused(kwargs[name]):
                    raise ValueError(f"`Trainer(barebones=True, {name}={kwargs[name]!r})` was passed. {reason}")
                kwargs[name] = off
            rank_zero_info(
                "You are running in `Trainer(barebones=True)` mode. All features that may impact raw speed have been"
                " disabled to facilitate analyzing the Trainer overhead. Specifically, the following features are"
                f" deactivated:{os.linesep}{os.linesep.join(_DEACTIVATED)}"
            )
        kwargs.update({n: default for n, default in _OPT_OUT.items() if n in kwargs and kwargs[n] is None})
        init(self, *args, **kwargs)

    return wrapped  # type: ignore[return-value]
