"""``AdvancedProfiler``: cProfile per action, reported with pstats, as Lightning 2.6's."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from collections import defaultdict
from pathlib import Path
from typing import Any

from trainmesh.profilers.profiler import Profiler


class AdvancedProfiler(Profiler):
    """Python's cProfile around each action: the functions each spent its time in.

    ``line_count_restriction``: the functions reported per action (a count, or a fraction of them);
    ``dump_stats``: also write each action's raw stats to ``dirpath/<...>-<action>.prof``.

    >>> profiler = AdvancedProfiler(line_count_restriction=5)
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        line_count_restriction: float = 1.0,
        dump_stats: bool = False,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.profiled_actions: dict[str, cProfile.Profile] = defaultdict(cProfile.Profile)
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats

    def start(self, action_name: str) -> None:
        for pr in self.profiled_actions.values():  # one cProfile may run at a time
            pr.disable()
        self.profiled_actions[action_name].enable()

    def stop(self, action_name: str) -> None:
        pr = self.profiled_actions.get(action_name)
        if pr is None:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        pr.disable()

    def _dump_stats(self, action_name: str, profile: cProfile.Profile) -> None:
        assert self.dirpath
        os.makedirs(self.dirpath, exist_ok=True)
        profile.dump_stats(
            os.path.join(self.dirpath, self._prepare_filename(action_name=action_name, extension=".prof"))
        )

    def summary(self) -> str:
        recorded_stats = {}
        for action_name, pr in self.profiled_actions.items():
            if self.dump_stats:
                self._dump_stats(action_name, pr)
            s = io.StringIO()
            ps = pstats.Stats(pr, stream=s).strip_dirs().sort_stats("cumulative")
            ps.print_stats(self.line_count_restriction)
            recorded_stats[action_name] = s.getvalue()
        return self._stats_to_str(recorded_stats)

    def teardown(self, stage: str | None) -> None:
        super().teardown(stage=stage)
        self.profiled_actions.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # cProfile.Profile does not pickle (ddp_spawn sends the Trainer to its workers)
        return (
            self.__class__,
            (),
            {"dirpath": self.dirpath, "filename": self.filename, "line_count_restriction": self.line_count_restriction},
        )
