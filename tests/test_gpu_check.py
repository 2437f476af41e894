"""The GPU check script runs end to end on the CPU (--dry-run), so it is ready when a GPU is lent."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from helpers.processes import run_program

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"
ROWS = [
    "CUDA-marked tests",
    "Trainer / raw loop, 32-true, step time",
    "Trainer / raw loop, bf16-mixed, step time",
    "compiled / eager (Trainer, bf16-mixed), step time",
    "ThroughputMonitor FLOPs per batch / hand count",
    "ThroughputMonitor MFU (bf16-mixed)",
    "estimate_memory / max_memory_allocated, 32-true",
    "estimate_memory / max_memory_allocated, bf16-mixed",
    "`trainmesh scale --processes 1`",
]


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = gpu_check  # its dataclasses look their module up while it loads
    spec.loader.exec_module(gpu_check)
    return gpu_check


@pytest.mark.slow
def test_gpu_check_dry_run_writes_every_row_without_errors(tmp_path):
    out = tmp_path / "gpu_check.md"
    # A hang guard under pytest's 900 s, not a time limit: the dry run (then a fresh process per
    # variant) took more than 280 s at load 19 (its old limit). run_program ends the variants too.
    done = run_program([str(SCRIPT), "--dry-run", "--out", str(out)], timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    table = out.read_text()
    assert "error:" not in table, table
    for row in ROWS:
        assert f"| {row}" in table, f"missing row {row!r} in\n{table}"
    # Every timed variant produced a step time (no 'n/a' where the CPU can measure).
    step_rows = [line for line in table.splitlines() if "step time" in line]
    assert all("n/a" not in line for line in step_rows), table
    assert "8 tests collected" in table or "collected" in table  # the CUDA tests were found, then skipped
    scale_row = next(line for line in table.splitlines() if line.startswith("| `trainmesh scale"))
    assert re.search(r"step ms: [0-9.]+", scale_row), scale_row  # read from the command's table


def test_gpu_check_refuses_to_run_without_cuda_unless_dry_run(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    # In this process (the script's main() as `python gpu_check.py --out x.md` runs it): a new
    # interpreter cost 2 CPU-s of imports for this one check. sys.exit(message) is exit status 1
    # with the message on stderr.
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--out", str(tmp_path / "x.md")])
    with pytest.raises(SystemExit) as refused:
        _load_script().main()
    assert isinstance(refused.value.code, str) and "--dry-run" in refused.value.code
    assert not (tmp_path / "x.md").exists()


def test_every_cuda_marked_test_is_in_a_file_the_check_collects(request):
    """The check collects only the files whose text names the mark: every test of this session
    that carries it (the whole suite's, in a full run; test_cuda.py's always) is in one of them."""
    collected = {Path(path) for path in _load_script().cuda_test_files()}
    marked = {Path(item.path) for item in request.session.items if item.get_closest_marker("cuda")}
    assert marked <= collected, sorted(map(str, marked - collected))
    assert Path(__file__).with_name("test_cuda.py") in collected  # its mark applied by pytestmark
