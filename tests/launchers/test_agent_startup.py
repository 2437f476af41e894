"""What keeps ``python train.py`` under ddp as quick to start and to end as torchrun: the rendezvous
trainmesh's own elastic agent uses, and the agent's exit (benchmarks/startup.py times both)."""

import os

import pytest

from trainmesh.launchers.elastic import AGENT_VARIABLE, _launch_config


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


# The agent's exit (it skips Python's final garbage collection): test_launch_processes.py's
# test_runtime_launch_example_trains_on_two_processes_and_its_agent_exits_frozen checks it in the
# README example's launch.
