"""Lightning 2.6's time-based ``val_check_interval`` ("DD:HH:MM:SS", a ``timedelta``, or a dict of its
keywords): validation at the first training batch end where the monotonic clock says the interval has
passed since the train loader was set up or the last validation in the fit ended (its
``_parse_time_interval_seconds``, fit loop ``setup_data``, ``_should_check_val_fx``, evaluation loop).

Lightning decides on each rank by its own clock; ranks that disagree would leave some in validation's
collectives while others train on. Here every rank takes rank 0's decision (one broadcast at each batch
end, only where a time-based interval is set and there are several processes)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from trainmesh.utilities.exceptions import MisconfigurationException

TIME_TYPES = (str, dict, timedelta)
BY_TIME = -1  # the fit loop's val_every for a time-based interval (Lightning's val_check_batch is None then)


def interval_seconds(value: str | dict[str, Any] | timedelta) -> float:
    """The interval in seconds, with Lightning's checks and words for a string that is not 'DD:HH:MM:SS'."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return timedelta(**value).total_seconds()
    parts = value.split(":")
    if len(parts) != 4:
        raise MisconfigurationException(
            f"Invalid time format for `val_check_interval`: {value!r}. Expected 'DD:HH:MM:SS'."
        )
    try:
        days, hours, minutes, seconds = (int(part) for part in parts)
    except ValueError:
        raise MisconfigurationException(
            f"Non-integer component in `val_check_interval` string: {value!r}. Use 'DD:HH:MM:SS'."
        ) from None
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()


class ValClock:
    """When the fit last started its clock: as its train loader was set up, and as each validation ended."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = time.monotonic()

    @classmethod
    def for_setting(cls, seconds: float | None) -> ValClock | None:
        """The clock of a time-based interval (``seconds``), started now; None without one."""
        return None if seconds is None else cls(seconds)

    def restart(self) -> None:
        self.last = time.monotonic()

    def due(self, runtime: Any) -> bool:
        """Whether the interval has passed, by rank 0's clock on every rank."""
        due = time.monotonic() - self.last >= self.seconds
        if runtime.world_size == 1:
            return due
        return bool(runtime.broadcast(due, 0))
