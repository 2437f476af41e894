import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from legs import SCRIPT, run, weights  # noqa: E402


@pytest.fixture(scope="session")
def handwritten(tmp_path_factory) -> dict[str, torch.Tensor]:
    """The keras-io seed's hand-written 2-process DDP loop: batch 16 per rank, Adam, 2 epochs."""
    out = tmp_path_factory.mktemp("ref") / "handwritten.pt"
    # The reference is torch alone (mp.spawn, gloo, DDP). It hung once in ~40 runs of this
    # suite on a loaded 2-core machine; one retry keeps one such hang from failing every
    # test that compares with it, and a second failure still fails them, with both reports.
    first = _reference_run(out)
    if first is None:
        return weights(out)
    second = _reference_run(out)
    assert second is None, f"first try:\n{first}\nsecond try:\n{second}"
    return weights(out)


def _reference_run(out: Path) -> str | None:
    """None when the hand-written run succeeded, else what it printed."""
    try:
        # Its parent a fork of the fork server, its two workers forks of that (spawned where they cannot be).
        result = run(str(SCRIPT), "handwritten", str(out), forked=True)
    except subprocess.TimeoutExpired as timeout:
        return f"timed out: {timeout}"
    return None if result.returncode == 0 else result.stderr[-2000:]


@pytest.fixture(scope="session")
def model_parallel_legs(tmp_path_factory):
    """The model-parallel legs (model_parallel_legs.py), shared by test_model_parallel.py,
    test_pipeline.py and test_tensor_parallel.py: every leg of its plan runs once per session."""
    from model_parallel_legs import Legs

    return Legs(tmp_path_factory.mktemp("model_parallel"))


@pytest.fixture(scope="module")
def one_process_group():
    """A gloo group of this test process alone, for the module's tests (FSDP2 on one rank). Its port is
    given to the group, not written into os.environ: a later test in this worker launching processes
    would rendezvous on it."""
    import torch.distributed as dist

    from trainmesh.launchers.environments import find_free_port

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{find_free_port()}", rank=0, world_size=1)
    yield
    if started:
        dist.destroy_process_group()
