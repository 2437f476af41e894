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

# Trainer arguments Lightning 1.x removed before 1.9 (pytorch-lightning 1.9.5 refuses each with Python's
# bare TypeError), found in ported programs: refused with the same type, saying what replaced them.
_REMOVED = "Lightning's argument until {0} (pytorch-lightning 1.9.5 refuses it too); today: {1}"
_REMOVED_ZERO = "Lightning 0.x's argument (pytorch-lightning 1.9.5 refuses it too); today: {0}"
REMOVED_ARGUMENTS = {
    "progress_bar_refresh_rate": _REMOVED.format(
        "1.6", "enable_progress_bar=False for 0, else callbacks=[TQDMProgressBar(refresh_rate=N)]"
    ),
    "checkpoint_callback": _REMOVED.format("1.6", "enable_checkpointing=True/False"),
    "reload_dataloaders_every_epoch": _REMOVED.format("1.5", "reload_dataloaders_every_n_epochs=1"),
    "flush_logs_every_n_steps": _REMOVED.format("1.6", "the logger's, CSVLogger(flush_logs_every_n_steps=N)"),
    "stochastic_weight_avg": _REMOVED.format("1.6", "callbacks=[StochasticWeightAveraging(swa_lrs=...)]"),
    "terminate_on_nan": _REMOVED.format("1.6", "detect_anomaly=True"),
    "prepare_data_per_node": _REMOVED.format("1.6", "the (data) module's attribute self.prepare_data_per_node"),
    "process_position": _REMOVED.format("1.6", "callbacks=[TQDMProgressBar(process_position=N)]"),
    "log_gpu_memory": _REMOVED.format("1.6", "callbacks=[DeviceStatsMonitor()]"),
    "weights_save_path": _REMOVED.format("1.7", "ModelCheckpoint(dirpath=...)"),
    "truncated_bptt_steps": _REMOVED.format("1.4", "the module's attribute self.truncated_bptt_steps = N"),
    "automatic_optimization": _REMOVED.format("1.2", "self.automatic_optimization = False in the module"),
    "row_log_interval": _REMOVED_ZERO.format("log_every_n_steps"),
    "log_save_interval": _REMOVED_ZERO.format("the logger's flush_logs_every_n_steps"),
    "early_stop_callback": _REMOVED_ZERO.format("callbacks=[EarlyStopping(monitor=...)]"),
    "train_percent_check": _REMOVED_ZERO.format("limit_train_batches"),
    "val_percent_check": _REMOVED_ZERO.format("limit_val_batches"),
    "test_percent_check": _REMOVED_ZERO.format("limit_test_batches"),
    "overfit_pct": _REMOVED_ZERO.format("overfit_batches"),
}


def lightning_arguments(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` wrapped by the three, the environment's defaults outermost (as Lightning's decorator is)."""
    return _defaults_from_environment(suggest_unknown_keywords(barebones_arguments(init), REMOVED_ARGUMENTS))


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
