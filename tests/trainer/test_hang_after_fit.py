"""No hang after fit (supervision/departures.py): a collective called on rank 0 only after fit
(the issue's ``full_tensor()`` under fsdp, a user's ``dist.all_reduce`` under ddp) ends the run
within the watchdog's timeout plus 30 s, with status 124 and a message that names rank 0's
collective, the user's line, where rank 1 is, and the likely cause.

Two 2-process runs (started the way users start them, ``python script.py``), started together;
and the message's pieces (where a stack waits, the verdict) on made-up stacks, without processes.
"""

import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_watchdog import Run  # noqa: E402  (the agent's session, killed whole on timeout)

HERE = Path(__file__).parent
TIMEOUT = 3.0  # hang_after_fit_run.TIMEOUT
RUN_TIMEOUT = 150  # a hang guard: each leg also ends itself after 100 s (faulthandler)


class HangRun(Run):
    def __init__(self, mode: str, out: Path) -> None:
        super().__init__(mode, out, script=HERE / "hang_after_fit_run.py", timeout=RUN_TIMEOUT)

    def waited_for(self) -> float:
        """Seconds from rank 0's call of the collective (``WAITS <time>``) to the end of the run."""
        # Not anchored to a line: the two ranks share stdout, and print() writes its text and its
        # newline separately, so rank 1's "SCRIPT ENDED" can run into this line (seen in CI).
        match = re.search(r"WAITS (\d+\.\d+)", self.output)
        assert match, f"rank 0 never reached the collective (exit {self.returncode}):\n{self.output[-4000:]}"
        return self.ended_at - float(match[1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    started = {mode: HangRun(mode, tmp_path_factory.mktemp(mode)) for mode in ("fsdp", "ddp")}
    deadline = time.monotonic() + RUN_TIMEOUT
    for run in started.values():
        run.wait(deadline)
    return started


@pytest.mark.skipif(sys.platform == "win32", reason="the elastic agent re-running the script is POSIX-only here")
@pytest.mark.parametrize(
    ("mode", "collective", "line"),
    [
        ("fsdp", "full_tensor", r"weights = \{k: v\.full_tensor\(\) for k, v in model\.state_dict\(\)\.items\(\)\}"),
        ("ddp", "all_reduce", r"dist\.all_reduce\(torch\.ones\(1\)\)"),
    ],
)
def test_a_collective_on_rank_0_only_after_fit_ends_the_run_naming_it(runs, mode, collective, line):
    run = runs[mode]
    tail = run.output[-6000:]
    assert run.waited_for() < TIMEOUT + 30, tail
    assert run.returncode == 124, tail
    assert "SCRIPT ENDED" in run.output  # rank 1 reached the end of its script; rank 0 never did
    assert "worker rank 0 failed (exit code 124)" in run.output, tail
    verdict = run.output[run.output.index("rank 0 waits in a collective that rank 1 will never join") :]
    # Rank 0: the collective, and the user's line that called it (file, line number and code).
    assert re.search(
        rf"rank 0: waits in {collective}\(\), called at hang_after_fit_run\.py:\d+ in \S+: {line}", verdict
    )
    assert "rank 1: left the process group at the end of its script" in verdict, verdict
    assert f"Likely cause: a collective called on rank 0 only: {collective}()" in verdict, verdict
    assert "call trainer.full_state_dict() on every rank" in verdict, verdict


def _frame(file: str, line: int, function: str, code: str):
    from trainmesh.supervision.call_site import Frame

    return Frame(file, line, function, code)


def test_where_a_stack_waits_names_the_users_call_and_the_collective_inside_it():
    import torch

    import trainmesh
    from trainmesh.supervision.call_site import call_site

    torch_dir, ours = Path(torch.__file__).parent, Path(trainmesh.__file__).parent
    frames = [
        _frame("/home/me/train.py", 40, "<module>", "main()"),
        _frame("/home/me/train.py", 31, "main", "trainer.save_checkpoint('final.ckpt')"),
        _frame(str(ours / "trainer" / "trainer.py"), 300, "save_checkpoint", "self._save_checkpoint(path)"),
        _frame(str(ours / "strategies" / "collectives.py"), 80, "barrier", "dist.barrier()"),
        _frame(str(torch_dir / "distributed" / "c10d_logger.py"), 81, "wrapper", "return func(*args, **kwargs)"),
        _frame(str(torch_dir / "distributed" / "distributed_c10d.py"), 4000, "barrier", "work.wait()"),
    ]
    site = call_site(frames)
    assert site.describe() == (
        "in barrier() inside save_checkpoint(), called at train.py:31 in main: trainer.save_checkpoint('final.ckpt')"
    )
    assert site.cause("rank 0").startswith(
        "a collective called on rank 0 only: save_checkpoint() (through barrier()) waits until every rank calls it"
    )
    # A decorator between the user's line and the collective is not the call; no user frame at exit.
    direct = call_site([frames[0], frames[1], *frames[4:]])
    assert direct.describe() == "in barrier(), called at train.py:31 in main: trainer.save_checkpoint('final.ckpt')"
    assert call_site(frames[2:]).describe() == "in barrier()"


def test_the_verdict_names_every_waiting_rank_and_the_departed_ones():
    from trainmesh.supervision.departure_report import Departure, Waiting, departure_message, groups_ahead

    assert groups_ahead({"0": 9, "1": 4, "2": 1}, {"0": 8, "1": 4}) == {"0": (9, 8)}
    user = _frame("/home/me/train.py", 12, "<module>", "dist.all_reduce(t)")
    waiting = {rank: Waiting(rank, 4.0, {"0": 9}, [user]) for rank in (0, 2)}
    departed = {1: Departure(1, {"0": 8}, where="", wait_s=60.0)}
    message = departure_message(waiting, departed, world_size=4, timeout=3)
    assert message.startswith("trainmesh watchdog: ranks 0, 2 wait in a collective that rank 1 will never join")
    assert "on process group 0 rank 0 issued 9 collectives, rank 1 8" in message
    assert "  rank 0: waits in a call into torch, called at train.py:12 in <module>: dist.all_reduce(t)" in message
    assert "  rank 1: left the process group at the end of its script; it waits there up to 60 s" in message
    assert "  rank 3: no answer (neither left nor waiting)" in message
    assert "Likely cause: a collective called on ranks 0, 2 only" in message
    assert "exit status 124" in message
