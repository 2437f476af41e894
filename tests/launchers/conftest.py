"""The weights of preemption_run.py's fit when nothing stops it, shared by test_preemption and
test_restarts (computed once per session)."""

import pytest
import torch
from preemption_helpers import run_script


@pytest.fixture(scope="session")
def ddp_reference(tmp_path_factory) -> dict[str, torch.Tensor]:
    """preemption_run.py's weights after its 60 steps on 2 processes, never stopped. ddp_fork
    (the same DDP, sampler and seeds as ddp, bit for bit) starts its workers without importing
    torch again: the cheapest multi-process run there is."""
    root = tmp_path_factory.mktemp("reference")
    done = run_script(root, "--strategy", "ddp_fork", forked=True)  # a fork that imported torch and trainmesh
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(root / "weights.pt")
