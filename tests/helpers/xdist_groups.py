"""How pytest-xdist shares the suite among its workers (``-n 2 --dist loadgroup``, pyproject's addopts).

A unit of work is a test file (its module fixtures launch processes once, as in a serial run),
or several files that share a session fixture defined in tests/ (a reference run such as
strategies/conftest.py's ``handwritten``): those go to one worker, so the run still happens once.
Files that share one get an ``xdist_group`` mark named after the first of them, which xdist adds
to their node ids (``...::test_x@tests/strategies/test_ddp.py``).

Units start longest first (the costs in durations.txt beside this file, seconds per test file,
measured; a file not listed counts as short), so that no long unit starts last while the other
worker idles. A stale table costs only balance, never correctness. To refresh it:
``python -m pytest -n 0 --durations=0 -q > out.txt; python tests/helpers/xdist_groups.py out.txt``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # the suite runs serially without xdist
    LoadScopeScheduling = object  # type: ignore[misc,assignment]

COSTS = Path(__file__).with_name("durations.txt")


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def group_files(items: list[pytest.Item], *, longest_first: bool) -> None:
    """Puts the files whose tests use one session fixture of tests/ (directly or through other
    fixtures) in one xdist group; ``longest_first`` (in an xdist worker) orders the items longest
    unit first, their order within a unit kept."""
    parent: dict[str, str] = {}

    def find(file: str) -> str:
        while parent.setdefault(file, file) != file:
            file = parent[file]
        return file

    first_user: dict[tuple[str, str], str] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for name in item.fixturenames:
            definitions = info.name2fixturedefs.get(name) if info is not None else None
            # baseid "" is pytest's or a plugin's fixture (tmp_path_factory): no run of ours
            if definitions and definitions[-1].scope == "session" and definitions[-1].baseid:
                user = first_user.setdefault((definitions[-1].baseid, name), _file(item))
                parent[find(_file(item))] = find(user)
    costs = read_costs()
    unit_cost: dict[str, float] = {}
    for file in {_file(item) for item in items}:
        unit_cost[find(file)] = unit_cost.get(find(file), 0.0) + costs.get(file, 0.0)
    for item in items:
        unit = find(_file(item))
        if unit != _file(item) or any(find(other) == unit != other for other in parent):
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(unit))
    if longest_first:
        items.sort(key=lambda item: -unit_cost[find(_file(item))])  # stable: each unit's order kept


def read_costs() -> dict[str, float]:
    if not COSTS.exists():
        return {}
    rows = (line.split() for line in COSTS.read_text().splitlines() if line and not line.startswith("#"))
    return {file: float(seconds) for seconds, file in rows}


class FileGroups(LoadScopeScheduling):  # type: ignore[misc,valid-type]
    """xdist's loadscope by file, except that an ``xdist_group`` (the ``@name`` xdist appends to
    a node id) is one unit however many files it spans; units go out in the workers' collection
    order (longest first, above), not xdist's order by number of tests."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        _, at, group = nodeid.rpartition("@")
        if at and "]" not in group and "::" not in group:  # not an "@" inside a parameter's id
            return group
        return nodeid.split("::", 1)[0]


def write_costs(durations_output: str) -> None:
    """durations.txt from the output of ``pytest --durations=0``: seconds per test file."""
    costs: dict[str, float] = {}
    for line in Path(durations_output).read_text().splitlines():
        match = re.match(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)", line)
        if match:
            file = match[2].split("::")[0]
            costs[file] = costs.get(file, 0.0) + float(match[1])
    rows = [f"{seconds:.0f} {file}" for file, seconds in sorted(costs.items(), key=lambda kv: -kv[1]) if seconds >= 1]
    header = "# seconds per test file (pytest --durations=0), for xdist's order: tests/helpers/xdist_groups.py"
    COSTS.write_text("\n".join([header, *rows]) + "\n")


if __name__ == "__main__":
    write_costs(sys.argv[1])
