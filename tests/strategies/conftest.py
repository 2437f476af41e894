import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from legs import SCRIPT, run, run_torchrun_nodes, weights  # noqa: E402


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
def torchrun_nodes(tmp_path_factory) -> Callable[[str], Path]:
    """Two torchrun nodes on 127.0.0.1 (one process each; agents forked, workers torchrun's new
    interpreters) in one launch for test_ddp.py and test_dp.py: the ``ddp`` fit (1 device per node),
    then the ``ddp2`` one (2 devices per node, one process each) in the process group the first made
    (helpers/batches.py's ``--batch``). ``torchrun_nodes(NAME)``: the file rank 0 saved, or the
    failure (a failed fit's traceback, the agents' stderr) if that fit saved none."""
    root = tmp_path_factory.mktemp("torchrun_nodes")
    legs = [
        ["trainer", str(root / f"{name}.pt"), name, devices, "2"] for name, devices in (("ddp", "1"), ("ddp2", "2"))
    ]
    spec = root / "batch.json"
    spec.write_text(json.dumps({"world": 2, "legs": [[argv, {}, str(root / argv[2])] for argv in legs]}))
    failure = ""
    try:
        run_torchrun_nodes(["--batch", str(spec)], [root / "node0", root / "node1"], timeout=240, forked_agents=True)
    except AssertionError as failed:  # the agents' stderr; a fit's traceback is in its leg's error file
        failure = "\n".join([*(path.read_text()[-3000:] for path in sorted(root.glob("*.error-*"))), str(failed)])

    def saved(name: str) -> Path:
        out = root / f"{name}.pt"
        assert out.exists(), f"the {name} fit on two torchrun nodes saved nothing:\n{failure}"
        return out

    return saved


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
