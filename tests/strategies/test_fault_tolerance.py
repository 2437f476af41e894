"""Trainer(fault_tolerance=...) on torchft: replica groups that survive a failure without a job restart.

The multi-process test needs torchft (an optional dependency: ``pip install torchft``) and is
skipped without it. It starts torchft's lighthouse on 127.0.0.1 and two replica groups of one
process each (fault_tolerance_run.py, each a fork of the fork server that imported torch and
trainmesh once: helpers/forked.py); group 1 dies hard after step 6 and is started again by the
test while group 0 trains on; the restarted group takes the weights, the Adam state, the step count
and the scheduler from group 0 and both end at step 30 with identical state.
The refusals need no torchft.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from legs import run

import trainmesh as tm
from helpers.forked import Forked, start_forked
from helpers.models import TutorialModule, loaders, quiet_trainer
from trainmesh.strategies import FSDPStrategy

HERE = Path(__file__).parent
SCRIPT = HERE / "fault_tolerance_run.py"
FT = tm.FaultTolerance("http://127.0.0.1:1", replica_group=0, num_replica_groups=2, host="127.0.0.1")

# How long the lighthouse counts a group that stopped heartbeating as alive. A group killed without
# a goodbye is dropped only then (the survivor's quorum waits for it: torchft's split-brain rule),
# so every kill costs the survivor this wait (14 kills in this file; a real run pays torchft's 5 s
# default). A live group's Manager heartbeats every 100 ms from a thread of its own (Rust, no GIL):
# 500 ms is 4 missed heartbeats, and a thread sleeping 100 ms at a time overslept by 57 ms at most
# in a minute at a load average of 18 on this machine's 2 cores (2000 ms took 24 s of the kill run).
HEARTBEAT_TIMEOUT_MS = 500

try:
    import torchft  # noqa: F401

    HAS_TORCHFT = True
except ImportError:
    HAS_TORCHFT = False


def _steps(path: Path) -> list[tuple[int, int, int]]:
    """(global step, participants, pid) of each step a group logged."""
    return [tuple(int(v) for v in line.split()) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def killed_and_rejoined(tmp_path_factory):
    """One run: group 1 killed after step 6 and started again; what each group logged and ended with."""
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): replica fault tolerance runs on it")
    from torchft.coordination import LighthouseServer

    out = tmp_path_factory.mktemp("ft")
    lighthouse = LighthouseServer(
        bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS
    )
    env = {**_env(), "RUST_LOG": "warn", "OMP_NUM_THREADS": "1"}

    def start(group: int, attempt: int) -> Forked:
        return start_forked(SCRIPT, ["replica", str(out), lighthouse.address(), str(group), str(attempt)], env=env)

    started = {(0, 0): start(0, 0), (1, 0): start(1, 0)}
    try:
        done = {(1, 0): started[1, 0].wait(timeout=240)}
        started[1, 1] = start(1, 1)
        done[1, 1] = started[1, 1].wait(timeout=240)
        done[0, 0] = started[0, 0].wait(timeout=240)
        codes = tuple(done[key].returncode for key in ((1, 0), (1, 1), (0, 0)))
    finally:
        for process in started.values():
            process.kill()
        lighthouse.shutdown()
    _write_logs(out, done)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("log_*")))
    return out, codes, logs


def _write_logs(out: Path, done: dict[tuple[int, int], subprocess.CompletedProcess]) -> None:
    """What each (group, attempt) printed, in OUT/log_GROUP_ATTEMPT."""
    for (group, attempt), finished in done.items():
        (out / f"log_{group}_{attempt}").write_text(finished.stdout + finished.stderr)


def test_while_both_groups_train_they_equal_ddp_on_two_processes(killed_and_rejoined):
    """Up to the kill, two replica groups of one process are ddp on two processes: the same data
    shards, gradients averaged over both, and group 1 (built from another seed) starts from group 0's
    weights as ddp's rank 1 starts from rank 0's. Their weights at that step equal plain ddp's.
    (Before: torchft's own step-0 sync halved the first step's gradient; 8e-7 away from a summed
    reference was what it looked like under Adam.)"""
    out, _, logs = killed_and_rejoined
    # The reference tests no start-up: two forks in one group (legs.run), no interpreter to start.
    done = run(str(SCRIPT), "ddp", str(out), timeout=240, env=_env(), forked=True, world=2)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reference = torch.load(out / "ddp_at_kill.pt")
    for group in (0, 1):
        weights = torch.load(out / f"at_kill_{group}.pt")
        for name, value in reference.items():
            assert torch.allclose(weights[name], value, rtol=0, atol=1e-6), (group, name, logs)


def _env() -> dict:
    import os

    paths = [str(HERE.parent.parent / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_a_killed_group_is_dropped_the_other_trains_on_and_the_restarted_one_rejoins(killed_and_rejoined):
    out, (first_exit, restarted_exit, survivor_exit), logs = killed_and_rejoined
    assert (first_exit, restarted_exit, survivor_exit) == (3, 0, 0), logs
    survivor = _steps(out / "steps_0_0")
    # Group 0 never stopped: one process ran every step from 1 to 30, in order.
    assert [s for s, _, _ in survivor] == list(range(1, 31)), logs
    assert len({pid for _, _, pid in survivor}) == 1
    participants = [n for _, n, _ in survivor]
    # Both groups until the kill, then group 0 alone, then both again once group 1 is back.
    assert participants[:6] == [2] * 6, participants
    alone = [s for s, n, _ in survivor if n == 1]
    assert alone and min(alone) == 7 and participants[-1] == 2, participants
    assert all(n == 2 for s, n, _ in survivor if s > max(alone)), participants
    # The restarted group took the step count from group 0 (it did not begin again at step 1).
    rejoined = _steps(out / "steps_1_1")
    assert rejoined[0][0] > 6 and [s for s, _, _ in rejoined] == list(range(rejoined[0][0], 31)), rejoined


def test_both_groups_end_with_identical_weights_optimizer_and_scheduler(killed_and_rejoined):
    out, codes, logs = killed_and_rejoined
    assert codes == (3, 0, 0), logs
    ends = [torch.load(out / f"final_{g}.pt", weights_only=True) for g in (0, 1)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == 30
    torch.testing.assert_close(ends[0]["weights"], ends[1]["weights"], rtol=0, atol=0)
    torch.testing.assert_close(ends[0]["adam"], ends[1]["adam"], rtol=0, atol=0)
    assert ends[0]["scheduler"] == ends[1]["scheduler"]
    assert ends[0]["scheduler"]["last_epoch"] == 30  # a step scheduler stepped at every one of the 30 steps
    # ... and they trained: not the shared initial weights.
    torch.manual_seed(3)
    initial = torch.nn.Linear(8, 32).weight
    assert not torch.equal(ends[0]["weights"]["net.0.weight"], initial)


@pytest.fixture(scope="module")
def fsdp_groups_killed_and_rejoined(tmp_path_factory):
    """One run of 2 replica groups of 2 fsdp processes: a process of group 1 dies after step 4 and
    takes the group's other one with it (fault_tolerance_run.PaceGroup: its launcher would, after a
    30 s wait), group 1 is started again; what each group logged and ended with."""
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): replica fault tolerance runs on it")
    from torchft.coordination import LighthouseServer

    out = tmp_path_factory.mktemp("ft_fsdp")
    lighthouse = LighthouseServer(
        bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS
    )
    env = {**_env(), "RUST_LOG": "warn", "OMP_NUM_THREADS": "1"}

    def start(group: int, attempt: int) -> Forked:
        # Each group is 2 forks in one process group, as its launcher would start them (legs.run).
        args = ["fsdp_replica", str(out), lighthouse.address(), str(group), str(attempt)]
        return start_forked(SCRIPT, args, env=env, cwd=HERE, world=2)

    started = {(0, 0): start(0, 0), (1, 0): start(1, 0)}
    try:
        done = {(1, 0): started[1, 0].wait(timeout=300)}
        started[1, 1] = start(1, 1)
        done[1, 1] = started[1, 1].wait(timeout=300)
        done[0, 0] = started[0, 0].wait(timeout=300)
        codes = tuple(done[key].returncode for key in ((1, 0), (1, 1), (0, 0)))
        reference = run(str(SCRIPT), "one_process", str(out), timeout=240, env=_env(), forked=True)
    finally:
        for process in started.values():
            process.kill()
        lighthouse.shutdown()
    _write_logs(out, done)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("log_*")))
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
    return out, codes, logs


@pytest.mark.slow
def test_fsdp_groups_equal_one_process_at_the_global_batch_while_both_train(fsdp_groups_killed_and_rejoined):
    """Two groups of 2 fsdp processes, group 1 built from another seed: up to the kill they are
    HSDP over 4 processes, i.e. one process at the 4 shards' global batch."""
    out, _, logs = fsdp_groups_killed_and_rejoined
    reference = torch.load(out / "one_at_kill.pt")
    for group in (0, 1):
        weights = torch.load(out / f"at_kill_{group}.pt")
        for name, value in reference.items():
            assert torch.allclose(weights[name], value, rtol=0, atol=1e-6), (group, name, logs)


@pytest.mark.slow
def test_an_fsdp_group_that_loses_a_process_is_dropped_and_rejoins_shard_by_shard(fsdp_groups_killed_and_rejoined):
    out, (first_exit, restarted_exit, survivor_exit), logs = fsdp_groups_killed_and_rejoined
    assert first_exit != 0 and (restarted_exit, survivor_exit) == (0, 0), logs
    survivor = _steps(out / "steps_0_0")
    assert [s for s, _, _ in survivor] == list(range(1, 13)), logs  # group 0 never stopped
    participants = [n for _, n, _ in survivor]
    assert participants[:4] == [2] * 4 and 1 in participants and participants[-1] == 2, participants
    rejoined = _steps(out / "steps_1_1")
    assert rejoined[0][0] > 4 and [s for s, _, _ in rejoined] == list(range(rejoined[0][0], 13)), rejoined
    # Process r of the restarted group took process r's shards of the weights and Adam state.
    for rank in (0, 1):
        ends = [torch.load(out / f"final_fsdp_{g}_{rank}.pt", weights_only=True) for g in (0, 1)]
        assert ends[0]["global_step"] == ends[1]["global_step"] == 12
        torch.testing.assert_close(ends[0]["weights"], ends[1]["weights"], rtol=0, atol=0)
        torch.testing.assert_close(ends[0]["adam"], ends[1]["adam"], rtol=0, atol=0)


KILLS = HERE / "fault_tolerance_kills_run.py"
# Where group 1 SIGKILLs itself, one trial each, inside its third step: forward, backward, around
# the gradient all-reduce (a delay after the last gradient), anywhere in the step (a delay after the
# batch starts), after the all-reduce; the delays vary so the kill lands at different moments.
KILL_PLAN = [
    "forward",
    "allreduce+1",
    "backward",
    "step+3",
    "allreduce+0",
    "allreduce+3",
    "step+8",
    "after_backward",
    "allreduce+2",
    "step+15",
    "forward",
    "allreduce+5",
]


@pytest.fixture(scope="module")
def killed_inside_steps(tmp_path_factory):
    """One run of two ddp groups: group 1 is SIGKILLed inside a step and started again (a fork) for
    each point of KILL_PLAN, while group 0 trains through all of them; what each logged and ended with."""
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): replica fault tolerance runs on it")
    from torchft.coordination import LighthouseServer

    out = tmp_path_factory.mktemp("ft_kills")
    # join_timeout: a live group whose step is slow (a busy machine) stays in the quorum.
    lighthouse = LighthouseServer(
        bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=3000, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS
    )
    env = {**_env(), "RUST_LOG": "warn", "OMP_NUM_THREADS": "1"}
    started = []
    try:
        for role in ("survivor", "doomed"):
            started.append(start_forked(KILLS, [role, str(out), lighthouse.address(), ",".join(KILL_PLAN)], env=env))
        survived = started[0].wait(timeout=600)
        # A survivor that died leaves the doomed group waiting for it: stop that at once.
        if survived.returncode != 0:
            started[1].kill()
        doomed = started[1].wait(timeout=120)
        codes = (survived.returncode, doomed.returncode if survived.returncode == 0 else "killed")
        for role, done in zip(("survivor", "doomed"), (survived, doomed)):
            (out / f"log_{role}").write_text(done.stdout + done.stderr)
    finally:
        for process in started:
            process.kill()
        lighthouse.shutdown()
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(out.glob("log_*")))
    return out, codes, logs


def _kill_steps(path: Path) -> list[tuple[int, ...]]:
    """(global step, participants, committed steps, errored, pid) of each step a group logged."""
    return [tuple(int(v) for v in line.split()) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_group_killed_inside_a_step_leaves_the_survivor_training(killed_inside_steps):
    """Issue 34: a group SIGKILLed in the middle of a step (forward, backward, the all-reduce) made
    the survivor crash too (torchft's DDP comm hook asserted on the failed all-reduce's future, 5 of
    6 trials). Now the survivor drops that step and trains on, every time."""
    out, codes, logs = killed_inside_steps
    assert codes == (0, 0), logs
    for attempt, point in enumerate(KILL_PLAN):  # each trial's attempt died at its point, by SIGKILL
        assert (out / f"killing_{attempt}").read_text() == point, logs
        assert int((out / f"dead_{attempt}").read_text()) == -9, logs
    survivor = _kill_steps(out / "steps_0")
    end = int((out / "end").read_text())
    # One process ran every step from 1 to the end, in order: it never stopped.
    assert [s[0] for s in survivor] == list(range(1, end + 1)), logs
    assert len({s[4] for s in survivor}) == 1
    # After each trial it trained alone, then with the restarted attempt again.
    alone_spells = sum(1 for before, now in zip(survivor, survivor[1:]) if before[1] == 2 and now[1] == 1)
    assert alone_spells >= len(KILL_PLAN) and survivor[-1][1] == 2, [s[1] for s in survivor]
    # A step whose all-reduce failed was dropped: the optimizer did not step (torchft's committed
    # count stayed); the kills inside the step made some all-reduces fail.
    committed = [0] + [s[2] for s in survivor]
    failed = [i for i, s in enumerate(survivor) if s[3]]
    assert failed, "no all-reduce of the survivor failed: the kills did not land inside its steps"
    assert all(committed[i + 1] == committed[i] for i in failed), survivor
    assert all(committed[i + 1] == committed[i] + 1 for i, s in enumerate(survivor) if not s[3]), survivor
    print(f"{len(KILL_PLAN)} kills, {len(failed)} failed all-reduces dropped, {end} steps")


@pytest.mark.slow
def test_after_the_kills_the_groups_end_with_identical_weights_and_optimizer(killed_inside_steps):
    out, codes, logs = killed_inside_steps
    assert codes == (0, 0), logs
    ends = [torch.load(out / f"final_{g}.pt", weights_only=True) for g in (0, 1)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == int((out / "end").read_text())
    assert ends[0]["committed"] == ends[1]["committed"]
    torch.testing.assert_close(ends[0]["weights"], ends[1]["weights"], rtol=0, atol=0)
    torch.testing.assert_close(ends[0]["adam"], ends[1]["adam"], rtol=0, atol=0)
    # The last attempt trained with the survivor after it rejoined (it did not only copy it).
    last = _kill_steps(out / "steps_1")
    assert sum(1 for s in last if s[1] == 2 and s[4] == last[-1][4]) >= 2, last


@pytest.mark.parametrize("strategy", ["hsdp", "auto", "zero1"])
def test_strategies_other_than_ddp_and_fsdp_are_refused_before_training(strategy):
    with pytest.raises(ValueError, match="fault_tolerance works with strategy='ddp'.*or strategy='fsdp'.*HSDP"):
        quiet_trainer(strategy=strategy, fault_tolerance=FT, max_steps=5)


def test_a_ddp_replica_group_of_several_processes_is_refused_pointing_to_fsdp():
    with pytest.raises(ValueError, match="each replica group is one process.*strategy='fsdp' for groups of several"):
        quiet_trainer(strategy="ddp", devices=2, fault_tolerance=FT, max_steps=5)


def test_fsdp_groups_are_the_replicas_so_hybrid_sharding_is_refused():
    with pytest.raises(ValueError, match="replica groups are the replicated dimension.*drop hybrid/shard_size"):
        quiet_trainer(strategy=FSDPStrategy(hybrid=True), devices=2, fault_tolerance=FT, max_steps=5)


def test_the_run_must_end_at_max_steps_not_an_epoch_count():
    with pytest.raises(ValueError, match="set max_steps"):
        quiet_trainer(strategy="ddp", fault_tolerance=FT, max_epochs=2)
    with pytest.raises(ValueError, match="set max_steps"):
        quiet_trainer(strategy="ddp", fault_tolerance=FT)


def test_replica_group_numbers_are_checked():
    with pytest.raises(ValueError, match="replica_group=2 must be in 0 .. num_replica_groups - 1"):
        tm.FaultTolerance("http://h:1", replica_group=2, num_replica_groups=2)
    with pytest.raises(ValueError, match="min_replicas=3"):
        tm.FaultTolerance("http://h:1", replica_group=0, num_replica_groups=2, min_replicas=3)


def test_without_torchft_fit_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchft", None)  # import torchft now raises ImportError
    trainer = quiet_trainer(strategy="ddp", fault_tolerance=FT, max_steps=2)
    with pytest.raises(ImportError, match=r"pip install \"trainmesh\[fault-tolerance\]\""):
        trainer.fit(TutorialModule(), loaders()[0])


class _EpochScheduled(TutorialModule):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]  # interval: epoch


def test_an_epoch_interval_scheduler_is_refused_before_the_first_step():
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): the refusal comes after its Manager starts")
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    try:
        ft = tm.FaultTolerance(lighthouse.address(), replica_group=0, num_replica_groups=1, host="127.0.0.1")
        model = _EpochScheduled()
        before = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(ValueError, match=r"schedulers \['StepLR'\] step per epoch.*\"interval\": \"step\""):
            quiet_trainer(strategy="ddp", fault_tolerance=ft, max_steps=3).fit(model, loaders()[0])
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    finally:
        lighthouse.shutdown()


def test_replica_groups_on_cpu_talk_through_torchfts_gloo_group():
    torchft = pytest.importorskip("torchft")
    from datetime import timedelta

    from trainmesh.strategies.replica_quorum import cross_group_process_group

    group = cross_group_process_group(torchft, torch.device("cpu"), timedelta(seconds=5))
    assert isinstance(group, torchft.ProcessGroupGloo)


@pytest.mark.cuda
def test_replica_groups_on_cuda_talk_through_torchfts_nccl_group():
    """Written for GPU groups (what crosses is on the GPU); only the choice is checked, on a CUDA
    machine: no run of two GPU groups is tested yet."""
    torchft = pytest.importorskip("torchft")
    from datetime import timedelta

    from trainmesh.strategies.replica_quorum import cross_group_process_group

    group = cross_group_process_group(torchft, torch.device("cuda", 0), timedelta(seconds=5))
    assert isinstance(group, torchft.ProcessGroupNCCL)
