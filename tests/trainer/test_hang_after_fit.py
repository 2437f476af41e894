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


def test_a_fit_ended_on_should_stop_of_some_ranks_is_named_as_the_cause():
    """trainer.should_stop set on rank 1 only: rank 1 ends its fit and leaves, rank 0 waits in its next step
    (measured: /work/progs/left-ddp/disagree.py under watchdog_timeout=20). Before, the verdict's likely cause
    was "a collective called on rank 0 only: fit()"; now it names the flag, where it was set, and the fix. A
    wait after every fit ended (no run_fit on the stack) keeps the collective's cause."""
    from trainmesh.supervision.departure_report import Departure, Waiting, departure_message
    from trainmesh.trainer import fit_loop

    script = _frame("/home/me/train.py", 23, "<module>", "trainer.fit(model)")
    loop = _frame(fit_loop.__file__, 47, "run_fit", "train(ctx, fit_data, resume_rng)")
    departed = {1: Departure(1, {"0": 15}, where="", wait_s=60.0, stopped_at="train.py:12 in on_train_batch_end")}
    message = departure_message({0: Waiting(0, 20.0, {"0": 16}, [script, loop])}, departed, world_size=2, timeout=20)
    assert (
        "Likely cause: trainer.should_stop was set on rank 1 only (on rank 1 at train.py:12 in on_train_batch_end): "
        "rank 1 ended its fit there while rank 0 went on" in message
    )
    assert "trainer.strategy.reduce_boolean_decision(stop, all=False)" in message
    after_fit = departure_message({0: Waiting(0, 20.0, {"0": 16}, [script])}, departed, world_size=2, timeout=20)
    assert "Likely cause: a collective called on rank 0 only" in after_fit
    # The same run seen by the step watchdog (rank 1's watch ended, marked finished with the flag's place)
    from trainmesh.supervision.stall_report import RankReport, decide

    report = RankReport(rank=0, stalled=True, idle_s=20.0, steps=2, collectives={"0": 16}, stack=[])
    place = "train.py:12 in on_train_batch_end"
    verdict = decide({0: report}, world_size=2, timeout=20, finished={1: place}, stopped={1: place})
    assert (
        "  rank 1: finished the loop on trainer.should_stop set at train.py:12 in on_train_batch_end" in verdict.message
    )
    assert "Likely cause: trainer.should_stop was set on rank 1 only" in verdict.message


def test_should_stop_records_the_line_that_set_it_for_the_supervision(tmp_path):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainmesh
    from trainmesh.supervision import departures

    class Stops(trainmesh.LightningModule):
        def __init__(self, stop: bool) -> None:
            super().__init__()
            self.layer, self.stop = torch.nn.Linear(2, 1), stop

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.stop:
                self.trainer.should_stop = True  # the line named

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    line = Stops.on_train_batch_end.__code__.co_firstlineno + 2
    for stop, expected in ((True, f"test_hang_after_fit.py:{line} in on_train_batch_end"), (False, "")):
        trainer = trainmesh.Trainer(
            max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path
        )
        trainer.fit(Stops(stop), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
        assert (departures._stopped_at, trainer.current_epoch) == (expected, 1 if stop else 2)
