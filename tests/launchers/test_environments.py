"""Reading a process's place in the run from torchrun's and SLURM's environment variables."""

import socket

import pytest

from trainmesh.launchers.base import ProcessInfo
from trainmesh.launchers.environments import check_port_free, find_free_port, first_host, managed_process


def torchrun_env(rank: int, *, local_rank: int, world: int = 4, local_world: int = 2, group_rank: int = 0) -> dict:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(group_rank),
        "MASTER_ADDR": "10.1.2.3",
        "MASTER_PORT": "29511",
        "TORCHELASTIC_RUN_ID": "run-42",
    }


def slurm_env(
    procid: int,
    *,
    localid: int,
    nodeid: int,
    ntasks: int = 6,
    job_id: str = "123456",
    per_node: str | None = "2(x3)",
    job_name: str = "train.sh",
) -> dict:
    env = {
        "SLURM_NTASKS": str(ntasks),
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(localid),
        "SLURM_NODEID": str(nodeid),
        "SLURM_NODELIST": "node[003-005,9]",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NAME": job_name,
    }
    if per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = per_node
    return env


# ---- torchrun --------------------------------------------------------------------------------
def test_torchrun_environment_gives_this_process_place():
    process = managed_process(torchrun_env(3, local_rank=1, group_rank=1), devices=2, num_nodes=2)
    assert process == ProcessInfo(
        global_rank=3,
        local_rank=1,
        node_rank=1,
        world_size=4,
        local_world_size=2,
        master_addr="10.1.2.3",
        master_port=29511,
    )
    assert not process.is_global_zero


def test_torchrun_rank_zero_is_global_zero():
    process = managed_process(torchrun_env(0, local_rank=0), devices=2, num_nodes=2)
    assert process.is_global_zero and process.node_rank == 0 and process.master_port == 29511


def test_torchrun_without_run_id_is_recognised_by_its_rank_variables():
    env = torchrun_env(1, local_rank=1, world=2, local_world=2)
    del env["TORCHELASTIC_RUN_ID"], env["GROUP_RANK"]
    process = managed_process(env, devices=2, num_nodes=1)
    assert (process.global_rank, process.local_rank, process.node_rank, process.world_size) == (1, 1, 0, 2)


def test_torchrun_node_rank_falls_back_to_rank_over_local_world_size():
    env = torchrun_env(3, local_rank=1)
    del env["GROUP_RANK"]
    assert managed_process(env, devices=2, num_nodes=2).node_rank == 1


def test_torchrun_world_size_disagreeing_with_devices_times_nodes_names_the_flag():
    with pytest.raises(ValueError, match="--nproc-per-node") as info:
        managed_process(torchrun_env(0, local_rank=0, world=4), devices=2, num_nodes=1)
    message = str(info.value)
    assert "started 4 processes" in message and "expects 2" in message


# ---- SLURM -----------------------------------------------------------------------------------
def test_slurm_task_gets_its_ranks_and_the_first_node_as_master():
    process = managed_process(slurm_env(3, localid=1, nodeid=1), devices=2, num_nodes=3)
    assert process.global_rank == 3 and process.local_rank == 1 and process.node_rank == 1
    assert process.world_size == 6 and process.local_world_size == 2
    assert process.master_addr == "node003"
    assert 15000 <= process.master_port < 35000


def test_slurm_port_comes_from_the_job_id_and_is_the_same_for_every_task():
    tasks = [
        managed_process(slurm_env(rank, localid=rank % 2, nodeid=rank // 2), devices=2, num_nodes=3)
        for rank in range(6)
    ]
    assert {t.master_port for t in tasks} == {15000 + 123456 % 20000}
    assert {t.master_addr for t in tasks} == {"node003"}
    assert [t.global_rank for t in tasks] == list(range(6))
    other_job = managed_process(slurm_env(0, localid=0, nodeid=0, job_id="123457"), devices=2, num_nodes=3)
    assert other_job.master_port != tasks[0].master_port


def test_slurm_respects_master_addr_and_port_when_set():
    env = {**slurm_env(0, localid=0, nodeid=0), "MASTER_ADDR": "head", "MASTER_PORT": "31000"}
    process = managed_process(env, devices=2, num_nodes=3)
    assert (process.master_addr, process.master_port) == ("head", 31000)


def test_slurm_ntasks_per_node_disagreeing_with_devices_names_the_flag():
    with pytest.raises(ValueError, match="--ntasks-per-node") as info:
        managed_process(slurm_env(0, localid=0, nodeid=0, per_node="4(x3)"), devices=2, num_nodes=3)
    assert "devices=2" in str(info.value)


def test_slurm_world_size_disagreeing_with_devices_times_nodes_raises():
    with pytest.raises(ValueError, match="--ntasks-per-node and --nodes"):
        managed_process(slurm_env(0, localid=0, nodeid=0, per_node=None), devices=2, num_nodes=2)


@pytest.mark.parametrize("job_name", ["bash", "interactive"])
def test_interactive_slurm_shell_is_not_a_managed_process(job_name):
    assert managed_process(slurm_env(0, localid=0, nodeid=0, job_name=job_name), devices=2, num_nodes=3) is None


def test_no_launcher_variables_means_no_managed_process():
    assert managed_process({}, devices=2, num_nodes=1) is None
    assert managed_process({"MASTER_ADDR": "x", "SLURM_NTASKS": "2"}, devices=2, num_nodes=1) is None


def test_torchrun_wins_over_an_enclosing_slurm_allocation():
    env = {**slurm_env(5, localid=1, nodeid=2, per_node="8(x3)"), **torchrun_env(1, local_rank=1, world=2)}
    process = managed_process(env, devices=2, num_nodes=1)
    assert (process.global_rank, process.world_size, process.master_addr) == (1, 2, "10.1.2.3")


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("a", "a"),
        ("a,b", "a"),
        ("gpu[1-4]", "gpu1"),
        ("n[07,09]", "n07"),
        ("node[003-005,9],gpu1", "node003"),
        ("  host-7  ", "host-7"),
    ],
)
def test_first_host_of_a_node_list(nodelist, first):
    assert first_host(nodelist) == first


# ---- ports -----------------------------------------------------------------------------------
def test_find_free_port_returns_a_port_that_can_be_bound():
    port = find_free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    check_port_free("127.0.0.1", port)  # released again: no error


def test_check_port_free_on_a_held_port_says_it_is_in_use_and_how_to_fix():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(ValueError, match="already in use") as info:
            check_port_free("127.0.0.1", port)
    assert str(port) in str(info.value) and "MASTER_PORT" in str(info.value)


# ---- processes the user started (Lightning's LightningEnvironment with LOCAL_RANK set) -----------
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS")


def test_local_rank_set_by_the_user_places_the_process_as_lightning_does(monkeypatch):
    """Two 'nodes' started by hand (NODE_RANK, LOCAL_RANK, MASTER_ADDR/PORT; no RANK): Lightning starts no
    process and reads the place from them. Before: trainmesh started its own agents, which hung."""
    pl = pytest.importorskip("lightning.pytorch")
    for name in _LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    env = {"LOCAL_RANK": "1", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Lightning's Trainer sets its process-wide rank_zero_only.rank to the rank it reads (1 here): kept for
    # this test only, or every later Lightning logger in this test process would write nothing
    from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
    from lightning_utilities.core.rank_zero import rank_zero_only as utilities_rank_zero_only

    for rank_zero_only in (fabric_rank_zero_only, utilities_rank_zero_only):
        monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
    theirs = pl.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    assert theirs.strategy.cluster_environment.creates_processes_externally
    process = managed_process(env, devices=2, num_nodes=2)
    assert (process.global_rank, process.local_rank, process.node_rank, process.world_size) == (
        theirs.global_rank,
        theirs.local_rank,
        theirs.node_rank,
        theirs.world_size,
    )
    env_ = theirs.strategy.cluster_environment
    assert (process.master_addr, process.master_port) == (env_.main_address, env_.main_port)
    with pytest.raises(ValueError, match="MASTER_PORT is not: set MASTER_PORT"):
        managed_process({"LOCAL_RANK": "0"}, devices=1, num_nodes=2)
