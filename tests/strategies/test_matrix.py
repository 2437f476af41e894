"""Every strategy x entry point x model kind either trains to its reference's weights or is
refused before training with an error naming the combination and the alternative.

Each strategy's leg runs all six of its cells in one process group (see matrix_run.py); legs of
the same world size share one launch (matrix_cells.LAUNCHES).
"""

from pathlib import Path

import pytest
from matrix_cells import CELLS, EXPECTED, judge, launch_of, run_legs  # noqa: E402


@pytest.fixture(scope="module")
def leg_results(tmp_path_factory):
    """Runs each leg once, on first use, with the other legs of its launch, and remembers where
    its cells' files are (or why it did not run)."""
    root = tmp_path_factory.mktemp("matrix")
    problems: dict[str, str] = {}

    def results_for(*legs: str) -> dict[str, Path]:
        for leg in legs:
            if leg not in problems:
                problems.update(run_legs(launch_of(leg), root))
            assert not problems[leg], problems[leg]
        return {leg: root / leg for leg in problems}

    return results_for


SLOW = {"hsdp", "ddp2"}  # four processes on two cores


@pytest.mark.parametrize("strategy", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s for s in EXPECTED])
def test_every_cell_matches_its_reference_or_is_refused_by_name(leg_results, strategy):
    reference_leg, _ = EXPECTED[strategy]
    results = leg_results(reference_leg, strategy)
    problems = {cell: judge(strategy, cell, results) for cell in CELLS}
    assert not any(problems.values()), {cell: problem for cell, problem in problems.items() if problem}
