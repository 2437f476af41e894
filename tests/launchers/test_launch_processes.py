"""What the launchers give the processes they start: a share of the cores, torchrun's variables
(so rank_zero_only knows its rank), and a Runtime that works, or says what to do, however the
script holds it. Each multi-process case runs as a real program with a hard timeout."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import trainmesh as tm

HERE = Path(__file__).parent
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
)


def run_program(
    script: str, *args: str, env: dict[str, str] | None = None, cwd: Path = HERE, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``script`` in its own session with no launcher variables and no OMP_NUM_THREADS
    unless ``env`` gives one; on timeout kill the session, so that no worker outlives it."""
    clean = {k: v for k, v in os.environ.items() if k not in (*LAUNCHER_VARIABLES, "OMP_NUM_THREADS")}
    process = subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def read_ranks(out: Path, world_size: int = 2) -> list[dict]:
    return [json.loads(Path(f"{out}.rank{rank}").read_text()) for rank in range(world_size)]


@pytest.fixture(scope="module")
def spawn_places(tmp_path_factory) -> tuple[list[dict], subprocess.CompletedProcess, dict[str, list[dict]]]:
    """spawn_run.py's one program: two ddp_spawn launches of 2 workers each reporting its place,
    the first with OMP_NUM_THREADS unset, the second with the OMP_NUM_THREADS=2 the program was
    started with. Returns the first's places, the run, and every launch's places with the parent's."""
    out = tmp_path_factory.mktemp("spawn") / "place"
    result = run_program("spawn_run.py", str(out), env={"OMP_NUM_THREADS": "2"}, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    places = {"share": read_ranks(f"{out}.share"), "chosen": read_ranks(f"{out}.chosen")}
    places["parent"] = [json.loads(Path(f"{out}.parent").read_text())]
    return places["share"], result, places


# ---- threads per worker ------------------------------------------------------------------------
def test_spawn_workers_use_their_share_of_the_cores(spawn_places):
    places, _, _ = spawn_places
    expected = max(1, (os.cpu_count() or 1) // 2)  # as the elastic launcher: cores // workers
    assert [place["threads"] for place in places] == [expected, expected]


def test_spawn_workers_keep_the_threads_the_user_chose(spawn_places):
    _, _, launches = spawn_places
    # What a plain process makes of OMP_NUM_THREADS=2 (torch caps it at the cores it finds): the
    # launching process's own count, taken before it imported trainmesh.
    plain = launches["parent"][0]["threads"]
    assert [place["threads"] for place in launches["chosen"]] == [plain] * 2


# ---- torchrun's variables, and rank_zero_only --------------------------------------------------
def test_spawn_workers_see_torchrun_variables(spawn_places):
    places, _, _ = spawn_places
    for rank, place in enumerate(places):
        assert place["rank"] == rank
        assert place["env"] == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0",
        }


def test_rank_zero_only_runs_in_exactly_one_spawn_worker(spawn_places):
    places, result, _ = spawn_places
    assert [place["rank_zero_only_ran"] for place in places] == [True, False]
    assert result.stderr.count("rank_zero_info ran") == 1, result.stderr  # logged, as Lightning's
    assert "rank_zero_info ran" not in result.stdout


def test_spawned_workers_start_from_the_parents_seeded_rng(spawn_places):
    """ddp_spawn workers start from the parent's RNG state, as ddp workers (which re-run the
    script, seed_everything included) do: a seeded parent gives reproducible workers. (spawn_run.py
    seeds before the launch; rank 0's torch.rand(4) is the parent's next draw.)"""
    _, result, _ = spawn_places
    assert "SAME" in result.stdout, result.stdout


# ---- a Runtime outside launch() ----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_multi_process_runtime_without_launch_says_to_call_launch(strategy, monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    runtime = tm.Runtime(accelerator="cpu", strategy=strategy, devices=2)
    with pytest.raises(RuntimeError, match=r"runtime\.launch\(fn\)") as info:
        runtime.setup(torch.nn.Linear(4, 1))
    message = str(info.value)
    assert "runtime.launch(train)" in message and "torchrun" in message


def test_module_level_runtime_works_inside_ddp_spawn(spawn_places):
    places, _, _ = spawn_places  # spawn_run.py's RUNTIME is made at module level
    assert [place["module_level"] for place in places] == [
        {"rank": 0, "world_size": 2, "rank_sum": 1.0},
        {"rank": 1, "world_size": 2, "rank_sum": 1.0},
    ]


# The README's example as `python runtime_launch_example.py` runs it, with one exit handler
# registered first in the agent (the process that ran the example, not a worker): what Python's
# last collection would scan when the agent exits. The workers run the example itself ("ddp" re-runs
# sys.argv[0]).
AGENT_AT_EXIT = """
import atexit, gc, os, runpy, sys
if "RANK" not in os.environ:
    atexit.register(lambda: print("agent frozen at exit:", gc.get_freeze_count() > 0, flush=True))
sys.argv[0] = sys.argv[1]
del sys.argv[1]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_runtime_launch_example_trains_on_two_processes_and_its_agent_exits_frozen(tmp_path):
    # The README's example of runtime.launch, run as the program a user would paste. Its agent, a
    # new interpreter, skips the final garbage collection when it exits: Python's last collections
    # over everything torch made cost it 0.3-1.5 s after its workers are done; frozen objects are
    # left to reference counting (one launch for both checks: 3 interpreters fewer).
    wrapper = tmp_path / "agent_at_exit.py"
    wrapper.write_text(AGENT_AT_EXIT)
    example = str(HERE / "runtime_launch_example.py")
    result = run_program(str(wrapper), example, env={"OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.endswith("agent frozen at exit: True\n"), result.stdout
    lines = result.stdout.strip().splitlines()[:-1]
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1", "epoch 2"]  # rank 0 alone prints
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines]
    assert losses[-1] < losses[0]
    state = torch.load(tmp_path / "model.pt")
    assert set(state) == {"model", "optimizer"} and "0.weight" in state["model"]


def test_the_failure_summary_names_the_rank_that_failed_not_the_peer_it_left_waiting(capsys):
    """A rank that raises closes its connections; a peer blocked in a collective may exit first with
    gloo's "Connection closed by peer". The summary names the rank whose own error ended the run."""
    from types import SimpleNamespace

    from trainmesh.launchers.failure_report import root_failure, workers_failed

    def process_failure(timestamp, message):
        return SimpleNamespace(timestamp=timestamp, exitcode=1, message={"message": message})

    casualty = process_failure(10, "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:4242")
    cause = process_failure(11, "ValueError: boom in on_train_end")
    failure = SimpleNamespace(failures={0: casualty, 1: cause})
    assert root_failure(failure) == (1, cause)
    assert workers_failed(failure, run_id="none", max_restarts=0) == 1
    err = capsys.readouterr().err
    assert "worker rank 1 failed (exit code 1)" in err and "boom in on_train_end" in err
    # Where every failure is a peer's, or the cause failed first, the first one is named, as before.
    only_peers = SimpleNamespace(failures={1: process_failure(5, "Connection reset by peer"), 0: casualty})
    assert root_failure(only_peers)[0] == 1
    assert root_failure(SimpleNamespace(failures={0: casualty, 1: process_failure(3, "OSError: disk")}))[0] == 1


# Every rank raises at once (as when each refuses a checkpoint with a shard missing), then records
# its exception in its error file exactly as torch's ErrorHandler.record_exception does (what
# _run_recording_errors calls), without importing torch: 1.7 s of CPU per worker here, 20 runs.
EVERY_RANK_RAISES = """
import json, os, signal, sys, time, traceback
rank, way = int(os.environ["RANK"]), sys.argv[1]
try:
    raise ValueError(f"rank {rank} refuses the checkpoint")
except ValueError as exc:
    if way == "across a second" and rank == 1:  # torch stamps an error in whole seconds: rank 1's is a later one
        first = os.path.join(os.path.dirname(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])), "0", "error.json")
        stamp = None
        while stamp is None:  # rank 0's record, not a guess at when it comes (late on a loaded machine)
            try:
                with open(first) as file:
                    stamp = int(json.load(file)["message"]["extraInfo"]["timestamp"])
            except (OSError, ValueError, KeyError):
                time.sleep(0.01)
        while int(time.time()) <= stamp:
            time.sleep(0.01)
    if way == "rank 0 slow to record" and rank == 0:
        time.sleep(60)  # a long teardown: the agent's SIGTERM comes before the record
    data = {"message": f"{type(exc).__name__}: {exc}", "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # a whole record, as trainmesh's workers write it
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as file:
        json.dump({"message": data}, file)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if way in ("across a second", "rank 0 slow to exit") and rank == 0:
        time.sleep(60)  # slow to exit (threads, a process group): the agent's SIGTERM ends it
    raise
"""
AGENT_RUNS = """
import sys
from trainmesh.launchers.elastic import run_agent
for way in sys.argv[2:]:
    try:
        run_agent(["-c", sys.argv[1], way], devices=2, num_nodes=1)
    except SystemExit as end:
        print(end.code, flush=True)
"""


@pytest.mark.slow
def test_when_every_rank_raises_at_once_the_summary_names_an_exception_and_exits_1(tmp_path):
    """The agent stops the other workers with SIGTERM once one fails: a rank that raised and was
    still exiting is listed as killed by it, and could be taken for the run's cause (exit 143,
    "its program did not fail") when it raised in the second before. 20 runs in one agent process
    (about 0.3 s each, 1 s across a second), each way several times."""
    from helpers.processes import run_code_forked

    ways = ["at once"] * 6 + ["rank 0 slow to exit"] * 5 + ["across a second"] * 5 + ["rank 0 slow to record"] * 4
    without = (*LAUNCHER_VARIABLES, "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RESTART_COUNT")
    done = run_code_forked(AGENT_RUNS, [EVERY_RANK_RAISES, *ways], timeout=300, without=without, cwd=tmp_path)
    context = f"{done.stdout}\n{done.stderr[-4000:]}"
    summaries = re.findall(r"trainmesh: (worker rank (\d) .*)\n(.*)", done.stderr)
    assert done.stdout.split() == ["1"] * len(ways) and len(summaries) == len(ways), context
    assert "killed by" not in done.stderr, context
    for way, (summary, rank, error) in zip(ways, summaries):
        assert summary.startswith(f"worker rank {rank} failed ("), (way, summary)
        assert error == f"ValueError: rank {rank} refuses the checkpoint", (way, summary, error)
        # The first that raised (rank 0, a second before rank 1), or the only one that recorded it.
        expected = {"across a second": "0", "rank 0 slow to record": "1"}.get(way, rank)
        assert rank == expected, (way, summary)
