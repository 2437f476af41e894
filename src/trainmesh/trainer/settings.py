"""The Trainer's loop settings (limits, cadences, accumulation, clipping), checked when it is built.

A mistake such as ``max_epochs=-5`` or ``limit_val_batches=1.5`` stops ``Trainer(...)`` with a
message that names the argument, instead of surfacing somewhere inside ``fit``. The checks run
in the Trainer's argument order, so the first mistake is the one reported.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from trainmesh.trainer.val_clock import TIME_TYPES, interval_seconds
from trainmesh.utilities.exceptions import MisconfigurationException, MisconfiguredValue


class InvalidSetting(MisconfiguredValue):
    """A loop argument out of its range: Lightning's type (``MisconfigurationException``), and the
    ``ValueError`` trainmesh raised before, so either ``except`` catches it."""


@dataclass(frozen=True)
class LoopSettings:
    """The checked values; the Trainer exposes each as an attribute of the same name.

    ``logger`` and ``enable_checkpointing`` are the Trainer's arguments after ``fast_dev_run``
    has switched them off: the Trainer builds its loggers and callbacks from these.
    """

    fast_dev_run: int
    max_steps: int
    max_epochs: int
    min_epochs: int | None
    min_steps: int | None  # with min_epochs: a stop asked (should_stop) waits for both (fit_loop)
    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int
    log_every_n_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: float | None
    gradient_clip_algorithm: str | None  # None: not given ("norm" where clipping), as Lightning's Trainer holds it
    logger: Any
    enable_checkpointing: bool
    max_epochs_unset: bool = False  # neither max_epochs nor max_steps (nor max_time) given: 1000, said at each fit
    # Lightning's trainer.max_epochs / min_epochs read None (as given) until a fit settles them (_parse_loop_limits)
    max_epochs_given: bool = True
    limits_settled: bool = False
    # Lightning 2.6's time-based val_check_interval, in seconds (val_clock.py); val_check_interval is then 1.0
    val_check_time: float | None = None
    # ... and Lightning's trainer has no val_check_interval attribute (trainer_fields.py), until one is set
    val_check_interval_absent: bool = False

    @property
    def clips(self) -> bool:
        """Whether the loop clips: Lightning's ``gradient_clip_val`` of 0 (its documented default) or below clips
        nothing, though the Trainer still holds the value."""
        return self.gradient_clip_val is not None and self.gradient_clip_val > 0


def settle_limits(settings: LoopSettings) -> LoopSettings:
    """As Lightning's ``_parse_loop_limits`` where a fit starts: ``trainer.max_epochs`` and ``min_epochs``
    read the values the loop runs with from then on (1000 or -1 for max_epochs, 0 or 1 for min_epochs)."""
    return settings if settings.limits_settled else replace(settings, limits_settled=True)


def given_max_epochs(settings: LoopSettings) -> int | None:
    """``trainer.max_epochs`` as Lightning reads it: None where none was given and no fit has settled it."""
    return settings.max_epochs if settings.max_epochs_given or settings.limits_settled else None


def given_min_epochs(settings: LoopSettings) -> int | None:
    """``trainer.min_epochs`` as Lightning reads it: as given until a fit settles it (0, or 1 with min_steps)."""
    if settings.min_epochs is None and settings.limits_settled:
        return 0 if settings.min_steps is None else 1
    return settings.min_epochs


def warn_if_max_epochs_unset(settings: LoopSettings) -> None:
    """As Lightning's ``_parse_loop_limits`` at each fit: a fit given no limit stops after 1000 epochs."""
    if settings.max_epochs_unset:
        from trainmesh.utilities.rank_zero import rank_zero_warn
        from trainmesh.utilities.warnings import PossibleUserWarning

        rank_zero_warn(  # Lightning's words
            "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set `max_epochs=-1`.",
            category=PossibleUserWarning,
        )


def check_loop_settings(
    *,
    fast_dev_run: bool | int,
    max_epochs: int | None,
    min_epochs: int | None,
    max_steps: int,
    min_steps: int | None = None,
    limit_train_batches: int | float | None,
    limit_val_batches: int | float | None,
    limit_test_batches: int | float | None,
    limit_predict_batches: int | float | None,
    val_check_interval: int | float | str | timedelta | dict[str, int] | None,
    check_val_every_n_epoch: int | None,
    num_sanity_val_steps: int,
    log_every_n_steps: int,
    accumulate_grad_batches: int,
    gradient_clip_val: float | None,
    gradient_clip_algorithm: str | None,
    logger: Any,
    enable_checkpointing: bool,
    max_epochs_given: bool = True,
) -> LoopSettings:
    """The Trainer's loop arguments checked (``ValueError`` naming the first bad one), with defaults filled in."""
    if check_val_every_n_epoch is None and isinstance(val_check_interval, float):
        # Lightning's type: a fraction of an epoch means nothing where validation ignores epochs
        raise MisconfigurationException(  # (Lightning's words; trainmesh has no time-based interval: an integer)
            "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
            "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`."
        )
    dev_run = _check_fast_dev_run(fast_dev_run)
    if dev_run:
        # One quick pass through every stage to shake out bugs: no logs, no checkpoints.
        max_epochs, max_steps, num_sanity_val_steps = 1, dev_run, 0
        limit_train_batches = limit_val_batches = limit_test_batches = limit_predict_batches = dev_run
        val_check_interval, logger, enable_checkpointing = 1.0, False, False  # (a time-based one too)
    max_steps = _check_int("max_steps", max_steps, minimum=-1)
    max_epochs_unset = max_epochs is None and max_steps == -1
    if max_epochs is None:
        max_epochs = 1000 if max_steps == -1 else -1
    max_epochs = _check_int("max_epochs", max_epochs, minimum=-1)
    min_epochs = None if min_epochs is None else _check_int("min_epochs", min_epochs, minimum=0)
    min_steps = None if min_steps is None else _check_int("min_steps", min_steps, minimum=0)
    limit_train_batches = _check_limit("limit_train_batches", limit_train_batches)
    limit_val_batches = _check_limit("limit_val_batches", limit_val_batches)
    limit_test_batches = _check_limit("limit_test_batches", limit_test_batches)
    limit_predict_batches = _check_limit("limit_predict_batches", limit_predict_batches)
    val_check_time, val_check_interval = _split_val_interval(val_check_interval)
    if check_val_every_n_epoch is not None:
        _check_int("check_val_every_n_epoch", check_val_every_n_epoch, minimum=1)
    num_sanity_val_steps = _check_int("num_sanity_val_steps", num_sanity_val_steps, minimum=-1)
    log_every_n_steps = _check_int("log_every_n_steps", log_every_n_steps, minimum=0)  # 0: never (barebones)
    accumulate_grad_batches = _check_int("accumulate_grad_batches", accumulate_grad_batches, minimum=1)
    gradient_clip_algorithm = _check_clipping(gradient_clip_val, gradient_clip_algorithm)
    return LoopSettings(
        fast_dev_run=dev_run,
        max_steps=max_steps,
        max_epochs=max_epochs,
        min_epochs=min_epochs,
        min_steps=min_steps,
        limit_train_batches=limit_train_batches,
        limit_val_batches=limit_val_batches,
        limit_test_batches=limit_test_batches,
        limit_predict_batches=limit_predict_batches,
        val_check_interval=val_check_interval,
        val_check_time=val_check_time,
        val_check_interval_absent=val_check_time is not None,
        check_val_every_n_epoch=check_val_every_n_epoch,
        num_sanity_val_steps=num_sanity_val_steps,
        log_every_n_steps=log_every_n_steps,
        accumulate_grad_batches=accumulate_grad_batches,
        gradient_clip_val=gradient_clip_val,
        gradient_clip_algorithm=gradient_clip_algorithm,
        logger=logger,
        enable_checkpointing=enable_checkpointing,
        max_epochs_unset=max_epochs_unset,
        max_epochs_given=max_epochs_given or bool(dev_run),
    )


def _check_clipping(gradient_clip_val: Any, gradient_clip_algorithm: str | None) -> str | None:
    """The clipping algorithm's name in lower case, Lightning's errors for a bad one or a bad value."""
    given = gradient_clip_algorithm
    if gradient_clip_algorithm is not None:
        gradient_clip_algorithm = str(gradient_clip_algorithm).lower()
    if gradient_clip_algorithm not in ("norm", "value", None):
        raise MisconfiguredValue(  # Lightning's words
            f"`gradient_clip_algorithm` {given} is invalid. Allowed algorithms: ['value', 'norm']."
        )
    if gradient_clip_val is not None and (
        isinstance(gradient_clip_val, bool) or not isinstance(gradient_clip_val, (int, float))
    ):
        raise TypeError(f"`gradient_clip_val` should be an int or a float. Got {gradient_clip_val}.")
    return gradient_clip_algorithm


# Lightning's words for the arguments it checks itself (its fit loops' and data connector's)
_LIGHTNING_WORDS = {
    "max_epochs": "`max_epochs` must be a non-negative integer or -1. You passed in {value}.",
    "max_steps": "`max_steps` must be a non-negative integer or -1 (infinite steps). You passed in {value}.",
    "check_val_every_n_epoch": "`check_val_every_n_epoch` should be an integer, found {value!r}.",
}


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    not_int = isinstance(value, bool) or not isinstance(value, int)
    if not_int or value < minimum:
        words = _LIGHTNING_WORDS.get(name, "")
        if words and (not_int or name != "check_val_every_n_epoch"):  # Lightning's says "integer" only
            raise MisconfiguredValue(words.format(value=value))
        raise MisconfiguredValue(f"{name}={value!r} must be an integer >= {minimum}")  # Lightning's class
    checked: int = value
    return checked


def whole_count(value: Any) -> Any:
    """A float above 1 with no fraction is that many batches, as Lightning's ``_determine_batch_limits``
    reads it (``limit_train_batches=10.0`` from a config file: 10 batches); anything else as given."""
    if isinstance(value, float) and value > 1.0 and value % 1.0 == 0:
        return int(value)
    return value


def _check_limit(name: str, value: int | float | None) -> int | float:
    if value is None:
        return 1.0
    value = whole_count(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSetting(f"{name}={value!r}: give a number of batches (int) or a fraction (float in [0, 1])")
    if value < 0 or (isinstance(value, float) and value > 1.0):
        raise InvalidSetting(
            f"{invalid_value_words(name, value)} (a float is a fraction of the batches, an int a count)"
        )
    return value


def invalid_value_words(name: str, value: int | float) -> str:
    """Lightning 2.6's words for a batch limit or interval out of range (its ``_determine_batch_limits``)."""
    return f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int."


def _split_val_interval(value: Any) -> tuple[float | None, int | float]:
    """``val_check_interval`` as Lightning 2.6 holds it: a time-based one ("DD:HH:MM:SS", a timedelta,
    a dict of its keywords) as seconds (``val_check_time``, its batch interval 1.0), else a checked
    count or fraction."""
    if isinstance(value, TIME_TYPES):
        return interval_seconds(value), 1.0
    return None, _check_val_interval(value)


def _check_val_interval(value: int | float | None) -> int | float:
    if value is None:
        return 1.0
    value = whole_count(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSetting(  # (Lightning 2.6 fails on comparing it: a TypeError)
            f"Unsupported type for `val_check_interval`: {type(value)!r}. Give an int (every that many training "
            "batches), a float (that fraction of an epoch) or a time ('DD:HH:MM:SS', a timedelta or its keywords)"
        )
    if value < 0 or (isinstance(value, float) and value > 1.0):
        raise InvalidSetting(invalid_value_words("val_check_interval", value))
    # 0.0 is Lightning's too: a fraction rounds to at least one batch, so it validates after every batch
    if isinstance(value, int) and value < 1:
        raise InvalidSetting(f"val_check_interval={value} must be at least 1 batch")
    return value


def _check_fast_dev_run(value: bool | int) -> int:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, int) and value >= 0:
        return value
    raise InvalidSetting(f"fast_dev_run={value!r}: use True, False or a number of batches (it should be >= 0)")
