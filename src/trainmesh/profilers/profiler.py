"""The profiler interface, as Lightning 2.6 defines it (``lightning.pytorch.profilers.Profiler``):
``start``/``stop`` an action by name (``profile(name)`` around a block), ``summary()`` a report,
``describe()`` writes it (to ``dirpath/<stage>-<filename>.txt`` where ``filename`` is given, else to
the log) at the end of a stage. The Trainer wraps its hook calls and loop steps in ``profile``.

>>> from trainmesh.profilers import SimpleProfiler
>>> profiler = SimpleProfiler()
>>> with profiler.profile("load data"):
...     pass
>>> list(profiler.recorded_durations)
['load data']
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers


class Profiler(ABC):
    """If you wish to write a custom profiler, you should inherit from this class."""

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None) -> None:
        self.dirpath = dirpath
        self.filename = filename
        self._output_file: TextIO | None = None
        self._write_stream: Callable[..., Any] | None = None
        self._local_rank: int | None = None
        self._stage: str | None = None

    @abstractmethod
    def start(self, action_name: str) -> None:
        """Defines how to start recording an action."""

    @abstractmethod
    def stop(self, action_name: str) -> None:
        """Defines how to record the duration once an action is complete."""

    def summary(self) -> str:
        return ""

    @contextmanager
    def profile(self, action_name: str) -> Generator[str]:
        """The block inside ``with profiler.profile(name):`` recorded as the action ``name``."""
        try:
            self.start(action_name)
            yield action_name
        finally:
            self.stop(action_name)

    def _rank_zero_info(self, *args: Any, **kwargs: Any) -> None:
        if self._local_rank in (None, 0):
            log.info(*args, **kwargs)

    def _prepare_filename(self, action_name: str | None = None, extension: str = ".txt") -> str:
        args = []
        if self._stage is not None:
            args.append(self._stage)
        if self.filename:
            args.append(self.filename)
        if self._local_rank is not None:
            args.append(str(self._local_rank))
        if action_name is not None:
            args.append(action_name)
        base = "-".join(args)
        base = re.sub(r"[\\/:*?\"<>|\n\r\t]", "_", base)  # characters no file system takes
        base = re.sub(r"_+", "_", base).strip()
        return (base or "profile") + extension

    def _prepare_streams(self) -> None:
        if self._write_stream is not None:
            return
        if self.filename and self.dirpath:
            filepath = os.path.join(self.dirpath, self._prepare_filename())
            os.makedirs(self.dirpath, exist_ok=True)
            file = open(filepath, "a")  # noqa: SIM115  # closed in teardown
            self._output_file = file
            self._write_stream = file.write
        else:
            self._write_stream = self._rank_zero_info

    def describe(self) -> None:
        """Write the report (Lightning's: the file is opened and closed here, so a profiler used on
        its own may call it too)."""
        self._prepare_streams()
        summary = self.summary()
        if summary and self._write_stream is not None:
            self._write_stream(summary)
        if self._output_file is not None:
            self._output_file.flush()
        self.teardown(stage=self._stage)

    def _stats_to_str(self, stats: dict[str, str]) -> str:
        stage = f"{self._stage.upper()} " if self._stage is not None else ""
        output = [stage + "Profiler Report"]
        for action, value in stats.items():
            header = f"Profile stats for: {action}"
            if self._local_rank is not None:
                header += f" rank: {self._local_rank}"
            output.append(header)
            output.append(value)
        return os.linesep.join(output)

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Called by the Trainer as a stage starts: the stage names the report, ``log_dir`` is the
        default ``dirpath``."""
        self._stage = stage
        self._local_rank = local_rank
        self.dirpath = self.dirpath or log_dir

    def teardown(self, stage: str | None) -> None:
        """Close the report's file."""
        self._write_stream = None
        if self._output_file is not None:
            self._output_file.close()
            self._output_file = None

    def __del__(self) -> None:
        self.teardown(stage=self._stage)

    @property
    def local_rank(self) -> int:
        return 0 if self._local_rank is None else self._local_rank


class PassThroughProfiler(Profiler):
    """Records nothing: the Trainer's default (it then wraps nothing, so there is no overhead)."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass
