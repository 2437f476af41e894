"""Stop anywhere, resume in a new process, end bit-identical to the run that never stopped.

Every case's legs run once per module (``Legs``): the stops each in its own process, the other
legs of one world size in one launch (helpers/batches.py).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.batches import Batches
from helpers.forked import run_forked
from helpers.models import DropoutNet, loaders, quiet_trainer

SCRIPT = Path(__file__).with_name("resume_run.py")


def _run(*args: str, env: dict[str, str], expect: int = 0) -> None:
    # A process of its own that dies hard (os._exit): a fork of this one, torch already imported.
    result = run_forked(SCRIPT, list(args), env={**os.environ, **env}, timeout=120)
    assert result.returncode == expect, result.stderr[-3000:]


STOPS = [
    pytest.param(17, {}, id="mid-epoch"),
    pytest.param(12, {}, id="epoch-end"),  # 96 samples / 8 = 12 batches per epoch
    pytest.param(20, {"ACCUMULATE": "3", "SCHED": "epoch"}, id="mid-accumulation"),
    pytest.param(7, {"WORKERS": "2"}, id="loader-workers"),
    # 2 ranks x 6 batches an epoch: batch 17 is mid-epoch; epoch means must not double count.
    pytest.param(17, {"STRATEGY": "ddp", "DEVICES": "2", "OMP_NUM_THREADS": "1"}, id="ddp-mid-epoch"),
]
PAUSES = [
    # 12 batches an epoch: step 17 ends 5 batches into epoch 1; the other 7 must still run.
    pytest.param(17, "trainer", {"MAX_STEPS": "30"}, id="then-more-steps"),
    pytest.param(17, "trainer", {}, id="then-max-epochs"),
    pytest.param(17, "last", {"MAX_STEPS": "30"}, id="last-ckpt"),
    # An epoch-interval scheduler must not step for an epoch that max_steps cut short.
    pytest.param(17, "trainer", {"SCHED": "epoch"}, id="epoch-scheduler"),
    # 4 steps an epoch: step 5 ends 3 batches into epoch 1.
    pytest.param(5, "last", {"ACCUMULATE": "3", "MAX_STEPS": "9"}, id="accumulation"),
]


class Legs:
    """Every case's legs, run once per module on first use; each case's files are in root/ID/.

    A stop leg dies hard (os._exit), so each runs in its own process, first. The other legs run
    through helpers/batches.py, legs of one world size in one launch: the full and pause legs,
    then the resume legs in other processes (a resume never shares a process with the leg that
    wrote its checkpoint, nor with the uninterrupted run it is compared with). Each leg sets only
    its own case's environment variables.
    """

    def __init__(self, root: Path) -> None:
        self.root, self.batches, self.stopped = root, None, {}

    def folder(self, case: str) -> Path:
        self.run()
        if self.stopped.get(case):
            raise AssertionError(self.stopped[case])
        return self.root / case

    def __call__(self, case: str, leg: str) -> None:
        """Raise if the case's leg ("full", "pause" or "resume") failed."""
        self.folder(case)
        self.batches(f"{case}/{leg}")

    def run(self) -> None:
        if self.batches is not None:
            return
        cases = [(param.id, param.values) for param in STOPS + PAUSES]
        for case, _ in cases:
            (self.root / case).mkdir()
        for param in STOPS:
            stop_batch, env = param.values
            folder = self.root / param.id
            try:
                _run("stop", str(folder / "unused.pt"), str(folder / "stop.ckpt"), str(stop_batch), env=env, expect=17)
            except (AssertionError, subprocess.TimeoutExpired) as failure:
                self.stopped[param.id] = f"the stop leg failed: {failure}"

        def world(env):
            return int(env.get("DEVICES", "1"))

        def leg(case, name, env, *args):
            folder = self.root / case
            return (
                f"{case}/{name}",
                world(env),
                [name, *(str(folder / a) if a.endswith((".pt", ".ckpt")) else a for a in args)],
                env,
            )

        first, resumes = [], []
        for param in STOPS:
            stop_batch, env = param.values
            first.append(leg(param.id, "full", env, "full.pt"))
            if param.id not in self.stopped:
                resumes.append(leg(param.id, "resume", env, "resumed.pt", "stop.ckpt"))
        for param in PAUSES:
            pause_steps, how, env = param.values
            first.append(leg(param.id, "full", env, "full.pt"))
            first.append(leg(param.id, "pause", env, "paused.pt", "pause.ckpt", str(pause_steps), how))
            resumes.append(leg(param.id, "resume", env, "resumed.pt", "pause.ckpt"))
        # One launch per world size for the first legs, then for the resumes.
        plan = sorted(first, key=lambda entry: entry[1]) + sorted(resumes, key=lambda entry: entry[1])
        self.batches = Batches(SCRIPT, self.root, plan, leg_timeout=120, forked=True, fork_workers=True)


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Legs:
    return Legs(tmp_path_factory.mktemp("resume"))


@pytest.mark.parametrize(("stop_batch", "env"), STOPS)
def test_stop_and_resume_is_bit_identical(legs, request, stop_batch, env):
    case = request.node.callspec.id
    tmp_path = legs.folder(case)
    full, resumed, ckpt = tmp_path / "full.pt", tmp_path / "resumed.pt", tmp_path / "stop.ckpt"
    legs(case, "full")
    assert ckpt.exists()
    legs(case, "resume")

    reference, candidate = torch.load(full), torch.load(resumed)
    assert candidate["global_step"] == reference["global_step"]
    for name, tensor in reference["state_dict"].items():
        assert torch.equal(tensor, candidate["state_dict"][name]), f"{name} differs after resume"
    # The epoch means logged after resuming equal the uninterrupted run's, too.
    assert candidate["metrics"]["train_loss_epoch"] == reference["metrics"]["train_loss_epoch"]
    assert candidate["metrics"]["val_loss"] == reference["metrics"]["val_loss"]


@pytest.mark.parametrize(("pause_steps", "how", "env"), PAUSES)
def test_max_steps_inside_an_epoch_then_resume_is_bit_identical(legs, request, pause_steps, how, env):
    """A run that max_steps ended mid-epoch goes on, resumed, as if it had never stopped."""
    case = request.node.callspec.id
    tmp_path = legs.folder(case)
    full, paused, resumed, ckpt = (tmp_path / name for name in ("full.pt", "paused.pt", "resumed.pt", "pause.ckpt"))
    legs(case, "full")
    legs(case, "pause")
    legs(case, "resume")

    reference, first, candidate = torch.load(full), torch.load(paused), torch.load(resumed)
    assert first["global_step"] == pause_steps
    assert first["batches_run"] + candidate["batches_run"] == reference["batches_run"]
    assert candidate["global_step"] == reference["global_step"]
    for name, tensor in reference["state_dict"].items():
        assert torch.equal(tensor, candidate["state_dict"][name]), f"{name} differs after resume"
    assert candidate["metrics"]["train_loss_epoch"] == reference["metrics"]["train_loss_epoch"]
    assert candidate["metrics"]["val_loss"] == reference["metrics"]["val_loss"]


def test_max_steps_inside_an_epoch_reports_the_partial_epoch_but_does_not_end_it(tmp_path):
    """The run's last, partial epoch is reported like any epoch end (its final weights not
    validated, as in Lightning, the batch not being one to validate after), but no epoch
    scheduler steps for it, and its checkpoint points inside it."""

    class Recording(DropoutNet):
        def __init__(self):
            super().__init__(scheduler_interval="epoch")
            self.validations, self.epoch_ends, self.outputs_seen = 0, 0, []

        def on_validation_end(self):
            self.validations += 1

        def training_epoch_end(self, outputs):
            self.outputs_seen.append(len(outputs))

        def on_train_epoch_end(self):
            self.epoch_ends += 1

    train, val = loaders()  # 12 batches an epoch; validation every 6
    model = Recording()
    trainer = quiet_trainer(max_steps=17, val_check_interval=0.5, num_sanity_val_steps=0)
    trainer.fit(model, train, val)
    assert trainer.global_step == 17 and trainer.current_epoch == 2  # reported like a finished epoch
    assert model.epoch_ends == 2 and model.outputs_seen == [12, 5]
    assert model.validations == 2  # epoch 0's two: none where max_steps stops (Lightning 2.6: test_fit_loop_reads.py)
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 1  # stepped for epoch 0 only
    assert "train_loss_epoch" in trainer.callback_metrics

    trainer.save_checkpoint(tmp_path / "paused.ckpt")
    saved = torch.load(tmp_path / "paused.ckpt", weights_only=False)
    # Lightning's epoch (the trainer's, the next); trainmesh's loop entry points inside the stopped epoch
    assert (saved["epoch"], saved["global_step"]) == (2, 17)
    assert saved["loop"]["stopped_epoch"] == 1
    assert saved["loop"]["batches_done"] == 5 and not saved["loop"]["epoch_finished"]
    assert [len(entry["epoch_outputs"]) for entry in saved["per_rank"]] == [5]


def test_a_forked_leg_starts_its_own_processes_as_a_new_interpreter_does(tmp_path):
    """The loader-workers stop leg runs forked (helpers/forked.py) and dies hard: its loader's
    workers must be its own children, started as ``python resume_run.py`` starts them, not the
    fork server's (which outlived the test, with them, waiting for a parent that had died)."""
    program = tmp_path / "start_method.py"
    program.write_text("import multiprocessing\nprint(multiprocessing.get_start_method())\n")
    fresh = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60)
    forked = run_forked(program, [], env=dict(os.environ), timeout=60)
    assert fresh.returncode == forked.returncode == 0, forked.stderr
    assert forked.stdout == fresh.stdout
