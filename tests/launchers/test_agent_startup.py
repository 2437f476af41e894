"""What keeps ``python train.py`` under ddp as quick to start and to end as torchrun: the rendezvous
trainmesh's own elastic agent uses, and the agent's exit (benchmarks/startup.py times both)."""

import os
from pathlib import Path

import pytest
from preemption_helpers import launcher_variables

from helpers.processes import run_program
from trainmesh.launchers.elastic import AGENT_VARIABLE, _launch_config

HERE = Path(__file__).parent


@pytest.fixture
def agent_environment(monkeypatch):
    """_launch_config sets variables for the workers in this process's environment: restore them."""
    for name in (AGENT_VARIABLE, "OMP_NUM_THREADS", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "MASTER_PORT", "NODE_RANK"):
        monkeypatch.setenv(name, "unset-by-the-test")
        monkeypatch.delenv(name)


def test_one_node_meets_on_the_agents_store_and_restarts_on_c10d(agent_environment):
    # Without restarts, torchrun --nproc-per-node's static rendezvous: no random delay, no
    # rounds of the dynamic rendezvous (0.3-0.8 s of every start).
    plain = _launch_config(devices=2, num_nodes=1, max_restarts=0)
    assert (plain.rdzv_backend, plain.rdzv_configs["rank"]) == ("static", 0)
    assert plain.rdzv_endpoint.startswith("127.0.0.1:")
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ
    # Lightning's ddp launcher sets NODE_RANK for the processes it starts (measured: "0" in both of
    # Lightning 2.6.6's ddp workers on one node), and programs read it.
    assert os.environ["NODE_RANK"] == "0"
    # With restarts, c10d's, the rendezvous that gives each attempt a store of its own.
    restarting = _launch_config(devices=2, num_nodes=1, max_restarts=1)
    assert (restarting.rdzv_backend, restarting.max_restarts) == ("c10d", 1)
    assert os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


AGENT_EXIT = """
import atexit, gc, os, sys
import torch
import trainmesh as tm

if "RANK" not in os.environ:  # the agent: what its last exit handler sees
    atexit.register(lambda: print("agent frozen at exit:", gc.get_freeze_count() > 0, flush=True))

def train(runtime):
    model = runtime.setup(torch.nn.Linear(2, 1))
    runtime.backward(model(torch.ones(1, 2)).sum())
    # One write of the whole line: print() writes its parts one by one, and the two workers'
    # parts then interleave on the shared pipe ("workerworker  01  trainedtrained").
    sys.stdout.write(f"worker {runtime.global_rank} trained\\n")
    sys.stdout.flush()

runtime = tm.Runtime(accelerator="cpu", strategy="ddp", devices=2)
runtime.launch(train, runtime)
"""


def test_the_agent_skips_the_final_garbage_collection_when_it_exits(tmp_path):
    # Python's last collections over everything torch made cost the agent 0.3-1.5 s after its
    # workers are done; frozen objects are left to reference counting.
    script = tmp_path / "agent_exit.py"
    script.write_text(AGENT_EXIT)
    done = run_program([str(script)], timeout=120, without=(*launcher_variables(), "MASTER_PORT"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("worker")) == [
        "worker 0 trained",
        "worker 1 trained",
    ]
    assert "agent frozen at exit: True" in done.stdout, done.stdout
