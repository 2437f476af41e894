"""Lightning's data hooks under ddp, two processes on two "machines" (one process each, with the
variables torchrun sets): prepare_data per machine (the Module's, by default) or once in all (the
DataModule's, prepare_data_per_node=False), and the batch-transfer hooks changing the batches each
rank's steps see, with the right dataloader_idx. One run (data_hooks_run.py) serves every check."""

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.forked import can_fork, run_forked
from helpers.lightning_order import GlobalBatches, rank_batches

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from trainmesh.launchers.environments import find_free_port

    out = tmp_path_factory.mktemp("data_hooks_ddp")
    port = str(find_free_port())
    envs = [
        {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        for rank in (0, 1)
    ]
    program = HERE / "data_hooks_run.py"
    if can_fork():
        # Each rank a fork of the fork server (helpers/forked.py) with torchrun's variables, not a
        # new interpreter importing torch and trainmesh (2.5 CPU-s each): the hooks read those
        # variables, not how the process started. Both at once: each waits for the other's rendezvous.
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda env: run_forked(program, [str(out)], env=env, timeout=150), envs))
        assert all(d.returncode == 0 for d in done), "\n".join(d.stdout + d.stderr for d in done)[-6000:]
        return out, [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    processes = [
        subprocess.Popen(
            [sys.executable, str(program), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for env in envs
    ]
    logs = []
    try:
        for process in processes:
            logs.append(process.communicate(timeout=150)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    assert all(p.returncode == 0 for p in processes), "\n".join(logs)[-6000:]
    return out, [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_prepare_data_runs_per_machine_or_once_in_all(run):
    out, ranks = run
    assert [r["local_rank"] for r in ranks] == [0, 0]  # two machines
    made = sorted(p.name for p in out.iterdir() if "prepare" in p.name)
    # Module: prepare_data_per_node=True (the default): on each machine's local rank 0, both here.
    # DataModule: prepare_data_per_node=False: on global rank 0 alone.
    assert made == ["datamodule-prepare-rank0", "module-prepare-rank0", "module-prepare-rank1"]


def test_batch_transfer_hooks_change_what_each_rank_sees(run):
    _, ranks = run
    # The DataModule's on_before_batch_transfer adds 100 * dataloader_idx, the Module's
    # on_after_batch_transfer negates: training's loader is index 0, validation's two are 0 and 1.
    # Training shards are the Trainer's shuffling sampler's (seed 0; sample i holds the value i),
    # evaluation shards are Lightning's DistributedSampler(shuffle=False) batched by 2 (rank r: samples
    # r, r+2, r+4, r+6 of 8, in batches [r, r+2] and [r+4, r+6]).
    for rank in (0, 1):
        dealt = rank_batches(8, world=2, rank=rank, batch_size=2)
        assert ranks[rank]["seen"]["train"] == [[-float(i) for i in batch] for batch in dealt]
    for rank, seen in enumerate(r["seen"]["val"] for r in ranks):
        expected = [[idx, [-(float(v) + 100 * idx) for v in (b, b + 2)]] for idx in (0, 1) for b in (rank, rank + 4)]
        assert seen == expected


def test_ddp_trains_on_the_changed_batches_like_one_process(run):
    """Plain torch, one process, each global batch (both ranks' samples) as the hooks changed it."""
    _, ranks = run
    torch.manual_seed(0)
    layer = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.01)
    x = torch.arange(8, dtype=torch.float32).unsqueeze(1)
    order = list(GlobalBatches(8, world=2, batch_size=2))  # step k: both ranks' k-th batches
    for rows in (order[:4], order[4:]):
        optimizer.zero_grad()
        F.mse_loss(layer(-x[rows]), 3 * x[rows]).backward()
        optimizer.step()
    expected = [p.detach().flatten().tolist() for p in layer.parameters()]
    for r in ranks:
        assert torch.allclose(torch.tensor(r["weights"]).flatten(), torch.tensor(expected).flatten(), atol=1e-6)
