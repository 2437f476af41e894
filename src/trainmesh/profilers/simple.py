"""``SimpleProfiler``: each action's calls, mean and total duration, as Lightning 2.6's."""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from pathlib import Path

from trainmesh.profilers.profiler import Profiler


class SimpleProfiler(Profiler):
    """Records the duration of each action; reports the mean duration of each and the total time
    (with ``extended``: the number of calls and the share of the whole run too).

    >>> profiler = SimpleProfiler()
    >>> profiler.start("a"); profiler.stop("a"); len(profiler.recorded_durations["a"])
    1
    """

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, extended: bool = True) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self.extended = extended
        self.start_time = time.perf_counter()

    def start(self, action_name: str) -> None:
        if action_name in self.current_actions:
            raise ValueError(f"Attempted to start {action_name} which has already started.")
        self.current_actions[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        end_time = time.perf_counter()
        if action_name not in self.current_actions:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        self.recorded_durations[action_name].append(end_time - self.current_actions.pop(action_name))

    def _make_report_extended(self) -> tuple[list[tuple[str, float, int, float, float]], int, float]:
        total_duration = time.perf_counter() - self.start_time
        report = []
        for a, d in self.recorded_durations.items():
            sum_d = math.fsum(d)
            report.append((a, sum_d / len(d), len(d), sum_d, 100.0 * sum_d / total_duration))
        report.sort(key=lambda x: x[4], reverse=True)
        return report, sum(x[2] for x in report), total_duration

    def _make_report(self) -> list[tuple[str, float, float]]:
        report = [(a, math.fsum(d) / len(d), math.fsum(d)) for a, d in self.recorded_durations.items()]
        report.sort(key=lambda x: x[1], reverse=True)
        return report

    def summary(self) -> str:
        sep = os.linesep
        output_string = f"{self._stage.upper()} " if self._stage is not None else ""
        output_string += f"Profiler Report{sep}"
        if not self.recorded_durations:
            return output_string + sep
        max_key = max(len(k) for k in self.recorded_durations)
        if self.extended:

            def row(action: str, mean: str, num_calls: str, total: str, per: str) -> str:
                return (
                    f"{sep}|  {action:<{max_key}s}\t|  {mean:<15}\t|  {num_calls:<15}\t|  {total:<15}\t|  {per:<15}\t|"
                )

            header = row("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %")
            lines = f"{sep}{'-' * len(header.expandtabs())}"
            report, total_calls, total_duration = self._make_report_extended()
            output_string += lines + header + lines
            output_string += row("Total", "-", f"{total_calls:}", f"{total_duration:.5}", "100 %") + lines
            for action, mean, calls, total, per in report:
                output_string += row(action, f"{mean:.5}", f"{calls}", f"{total:.5}", f"{per:.5}")
        else:

            def short_row(action: str, mean: str, total: str) -> str:
                return f"{sep}|  {action:<{max_key}s}\t|  {mean:<15}\t|  {total:<15}\t|"

            header = short_row("Action", "Mean duration (s)", "Total time (s)")
            lines = f"{sep}{'-' * len(header.expandtabs())}"
            output_string += lines + header + lines
            for action, mean, total in self._make_report():
                output_string += short_row(action, f"{mean:.5}", f"{total:.5}")
        return output_string + lines + sep
