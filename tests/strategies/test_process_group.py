"""Leaving the process group (strategies/process_group.py): the "leave together" barrier ends
within its timeout on every rank, rank 0 included or not, says which ranks did not arrive, and
a rank that arrives after the others left still leaves at once and cleanly.

One 2-process program (torch.multiprocessing, gloo): rank 1 reaches the teardown first and waits
TIMEOUT s; rank 0 is busy (no collective) until rank 1 has left, or LATE s > TIMEOUT at most, then
leaves too. An event that rank 1 sets once it left ends rank 0's wait, not a fixed sleep: the run
takes TIMEOUT s, not LATE s, and a rank 1 that waits on past its timeout still shows, leaving
after rank 0 arrived.

The second program (RACE) goes on, after its clean leave, to join (strategies/process_group.py's
join_process_group) twice more on a store that outlives the groups, as an elastic agent's does:
a group that rank 1 leaves as a rank that raised leaves it, while rank 0 waits in a collective,
then the next, which rank 0 joins late, and a third that rank 1 never joins.
"""

import re
import textwrap

import pytest
from legs import run

TIMEOUT, LATE = 2.0, 12.0

PROGRAM = textwrap.dedent(f"""
    import time, torch, torch.distributed as dist, torch.multiprocessing as mp
    from trainmesh.launchers.environments import find_free_port
    from trainmesh.strategies.process_group import leave_process_group

    def worker(rank, port, rank_1_left):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{{port}}", rank=rank, world_size=2)
        dist.all_reduce(torch.ones(1))
        if rank == 0:
            rank_1_left.wait({LATE})  # busy outside any collective until rank 1 gave up waiting and left
            print(f"ARRIVES {{time.time()}}", flush=True)
        missing = leave_process_group(failed=False, timeout={TIMEOUT})
        print(f"RANK {{rank}} LEFT {{time.time()}} missing={{missing}}", flush=True)
        if rank == 1:
            rank_1_left.set()

    if __name__ == "__main__":
        left = mp.get_context("fork").Event()  # forks, as the workers are
        mp.start_processes(worker, args=(find_free_port(), left), nprocs=2, start_method="fork")
        print("ALL LEFT", flush=True)
""")


def run_program_text(text: str, folder, timeout: float):
    """``text`` as a program, a fork of the fork server (helpers/forked.py: torch imported once,
    not by a new interpreter); its workers are its forks, as under ``python -c``."""
    script = folder / "program.py"
    script.write_text(text)
    return run(str(script), timeout=timeout, forked=True)


def test_the_leave_barrier_ends_within_its_timeout_on_every_rank_and_names_who_did_not_arrive(tmp_path):
    result = run_program_text(PROGRAM, tmp_path, timeout=90)
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ALL LEFT" in out
    arrives = float(re.search(r"^ARRIVES (\S+)$", out, re.MULTILINE)[1])
    left = {int(m[1]): (float(m[2]), m[3]) for m in re.finditer(r"^RANK (\d) LEFT (\S+) missing=(.*)$", out, re.M)}
    # Rank 1 (not rank 0, where gloo's monitored_barrier enforced its timeout) stopped waiting
    # long before rank 0 arrived, naming it; rank 0, arriving late, left without waiting for anyone.
    assert left[1][1] == "[0]" and left[1][0] < arrives, out
    assert left[0][1] == "[]", out
    assert "rank 1 leaves the process group without rank 0, which did not reach its teardown" in result.stderr
    assert f"within {TIMEOUT:g} s" in result.stderr


# Rank 0 hosts the store. Rank 1 reaches the teardown first and, between two polls of the count
# (made slow here), rank 0 arrives, sees everyone and used to leave at once: rank 1 then found the
# store gone and waited out its whole timeout (60 s by default), saying ranks 0 and 1 never came.
RACE = textwrap.dedent(f"""
    import datetime, os, time, types, torch, torch.distributed as dist, torch.multiprocessing as mp
    from trainmesh.launchers.base import ProcessInfo
    from trainmesh.launchers.environments import find_free_port
    from trainmesh.strategies.process_group import join_process_group, leave_process_group
    import trainmesh.supervision.departures as departures

    def worker(rank, port, agent_port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{{port}}", rank=rank, world_size=2)
        dist.all_reduce(torch.ones(1))
        if rank == 1:  # polls the count every 2 s instead of every 0.05 s
            departures.time = types.SimpleNamespace(sleep=lambda s: time.sleep(2.0), monotonic=time.monotonic)
        else:
            time.sleep(0.5)  # rank 1 is in its first sleep when rank 0 arrives
        missing = leave_process_group(failed=False, timeout={LATE})
        print(f"RANK {{rank}} missing={{missing}}", flush=True)
        # Two more groups on the agent's store: the first left as after a failure (rank 1 raised
        # before a collective that rank 0 waits in), the next joined by rank 0 late. Rank 1 used
        # to read rank 0's address of the group before, and wait on it until the timeout.
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        process = ProcessInfo(global_rank=rank, world_size=2, master_port=agent_port)
        join_process_group(process, torch.device("cpu"), backend="gloo", timeout=datetime.timedelta(seconds=15))
        departures.watch_departures(60.0)  # armed as the Runtime arms it
        if rank == 0:  # waits in a collective that rank 1, which raised, never joins
            try:
                dist.all_reduce(torch.ones(1))
            except RuntimeError as error:
                # gloo words the peer's departure by timing ("closed by peer", "reset by peer", ...): any
                # error but the group's timeout shows rank 0 did not wait for rank 1, which raised
                timed_out = "timed out" in str(error).lower() or "timeout" in str(error).lower()
                print(f"RANK 0 GROUP 0 {{error if timed_out else 'ended by the peer'}}", flush=True)
        leave_process_group(failed=True)
        if rank == 0:
            time.sleep(1.0)
        join_process_group(process, torch.device("cpu"), backend="gloo", timeout=datetime.timedelta(seconds=15))
        total = torch.ones(1)
        dist.all_reduce(total)
        departures.watch_departures(60.0)
        old = departures._watch
        dist.destroy_process_group()  # as a program may, without the leave that stops the watch
        departures.watch_departures(60.0)  # drops the watch of the group that is gone
        print(f"RANK {{rank}} OLD WATCH alive={{old._thread.is_alive()}}", flush=True)
        print(f"RANK {{rank}} GROUP 1 sum={{total.item():g}}", flush=True)
        if rank == 0:  # a third group, which rank 1 never joins (it ends): rank 0 waits 2 s, not 30 minutes
            try:
                join_process_group(process, torch.device("cpu"), backend="gloo", timeout=datetime.timedelta(seconds=2))
            except Exception as error:
                print(f"RANK 0 JOINED ALONE {{type(error).__name__}}: {{error}}", flush=True)

    if __name__ == "__main__":
        agent_port = find_free_port()
        agent_store = dist.TCPStore("127.0.0.1", agent_port, is_master=True, wait_for_workers=False)
        mp.start_processes(worker, args=(find_free_port(), agent_port), nprocs=2, start_method="fork")
        print("ALL LEFT", flush=True)
""")


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    return run_program_text(RACE, tmp_path_factory.mktemp("race"), timeout=120)


def test_rank_0_the_store_s_host_stays_until_every_rank_has_seen_that_all_arrived(race):
    result = race
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RANK 0 missing=[]" in result.stdout and "RANK 1 missing=[]" in result.stdout, result.stdout
    assert "leaves the process group without" not in result.stderr, result.stderr[-3000:]


def test_a_group_after_a_failed_one_forms_on_a_store_that_outlives_both(race):
    # Before: rank 1 waited on rank 0's closed address of the failed group, and the join ended in
    # "Gloo connectFullMesh failed ... Connection refused" at the timeout (15 s here).
    assert race.returncode == 0, race.stderr[-3000:]
    for rank in (0, 1):
        assert f"RANK {rank} GROUP 1 sum=2" in race.stdout, race.stdout + race.stderr[-3000:]


def test_a_rank_that_raised_closes_its_connections_so_a_peer_waiting_on_it_fails_at_once(race):
    # Before: rank 1's departure watch held the failed group open, and rank 0 waited in its
    # collective until the group's timeout (15 s here; 30 minutes by default).
    assert "RANK 0 GROUP 0 ended by the peer" in race.stdout, race.stdout + race.stderr[-3000:]


def test_a_rank_that_never_joins_ends_the_join_within_its_wait_naming_it(race):
    # Before: rank 0 waited in torch's join for the group's whole timeout (30 minutes by default,
    # as Lightning's init_process_group) and then failed without naming the missing rank.
    assert "RANK 0 JOINED ALONE MissingRanks: rank 0 waited 2 s" in race.stdout, race.stdout + race.stderr[-3000:]
    assert "but rank 1 never joined: every process must call the same Trainer method" in race.stdout


def test_a_watch_of_a_group_that_is_gone_is_stopped_when_dropped(race):
    # Before: watch_departures dropped it and its thread polled on for the rest of the process.
    for rank in (0, 1):
        assert f"RANK {rank} OLD WATCH alive=False" in race.stdout, race.stdout + race.stderr[-3000:]


def test_the_join_waits_the_group_s_whole_timeout_as_lightning(monkeypatch):
    # Before: 10 minutes under the default 30-minute timeout, so a run whose rank 0 downloaded for
    # 15 minutes before fit (which Lightning's init_process_group waits for) ended in MissingRanks.
    import datetime

    import torch
    import torch.distributed as dist

    from trainmesh.launchers.base import ProcessInfo
    from trainmesh.strategies.process_group import MissingRanks, join_process_group

    waits = []

    def rendezvous(url, rank, world_size, timeout):
        waits.append(timeout)
        raise dist.DistStoreError("no one came")

    monkeypatch.setattr(dist, "rendezvous", rendezvous)
    with pytest.raises(MissingRanks, match="waited 1800 s"):
        join_process_group(
            ProcessInfo(world_size=2), torch.device("cpu"), backend="gloo", timeout=datetime.timedelta(minutes=30)
        )
    assert waits == [datetime.timedelta(minutes=30)]
