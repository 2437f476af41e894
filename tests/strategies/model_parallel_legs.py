"""The legs of test_model_parallel.py, test_pipeline.py and test_tensor_parallel.py: Trainer runs of
ModelParallelStrategy's layouts (tensor parallel, pipeline schedules, FSDP x TP, pipeline x
replicate) in real processes on gloo, each against one process training the same model on the
same data (model_parallel_run.py: global batch 16 everywhere), and what the tests compare them with.

Tolerance, everywhere: every weight within ATOL (1e-5) absolute, and val_loss / train_loss
within ATOL; checkpoints that must restore weights compare them exactly. The layouts measured
within 2.4e-7 of one process (float32 reordering of the same sums); a lost micro-batch, a
gradient scaled twice or a skipped clip moves weights by 1e-3 to 1e-1.

The programs are shared: each (layout, options) runs once per test session (``Legs``, the
``model_parallel_legs`` fixture of conftest.py), so the reference runs and the checkpointing runs
serve the tests of all three files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from legs import FORK_WORKERS, HERE, run

from helpers.batches import LegCrashed
from helpers.leg_crashes import crash_at, fatal_signal

SCRIPT = HERE / "model_parallel_run.py"
ATOL = 1e-5
METRICS = ("val_loss", "train_loss")
STEPS = 8  # model_parallel_run.TRAIN_SAMPLES (64) / 16 per step x 2 epochs


class RunFailed(Exception):
    """A program exited non-zero (its stderr tail is the message)."""


CLIPPED = {"clip": 0.05, "accumulate": 2}

# Every leg the tests below use, launched once each, in batches of one world size (one launch,
# one process group per batch: starting 2-8 interpreters per leg was most of this module's time).
# The order matters: a leg that resumes a checkpoint comes after the leg that saves it.
# A leg with save= and evaluate=1 is also the leg of each alone (ANSWERED_BY): saving after fit and
# testing after that change no weight, and its metrics are fit's (model_parallel_run.py).
PLAN: list[tuple[str, dict]] = [
    # world 4 (fsdp_tp saves the checkpoint that ddp and single resume)
    ("fsdp_tp", {"save": "fsdp_tp.ckpt", "evaluate": 1}),
    ("fsdp_tp", {"accumulate": 2}),
    ("fsdp_tp", CLIPPED),
    ("pp_replicate", {}),
    ("pp_fsdp", {}),
    ("pp_tp_ac", {}),
    # world 2
    ("pp_1f1b", {"save": "pp_1f1b.ckpt", "evaluate": 1}),
    ("pp_1f1b", {"resume": "pp_1f1b.ckpt"}),
    ("ddp", {"resume": "fsdp_tp.ckpt"}),
    ("pp_1f1b", {"clip": 0.05}),
    ("pp_1f1b", CLIPPED),
    ("pp_gpipe", {}),
    ("pp_interleaved", {}),
    ("pp_zbv", {"val": 0}),
    ("pp_looped", {}),
    ("pp_izb", {}),
    ("pp_dualpipev", {"val": 0}),
    ("tp", {}),
    ("tp_lossp", {}),
    ("tp", {"clip": 0.05}),
    # world 1: the references, and the resumes on one process
    ("single", {"evaluate": 1}),
    ("single", {"val": 0}),
    ("single", {"clip": 0.05}),
    ("single", {"accumulate": 2}),
    ("single", CLIPPED),
    ("single", {"epochs": 3}),
    ("single", {"epochs": 1}),
    ("single", {"resume": "pp_1f1b.ckpt"}),
    ("single", {"resume": "pp_1f1b.ckpt", "epochs": 3}),
    ("single", {"resume": "fsdp_tp.ckpt", "epochs": 3}),
    # world 8: one epoch (4 steps), its 8 processes on 2 cores (a second epoch: 3.4 CPU-s more)
    ("pp_fsdp_tp", {"epochs": 1}),
]


def _key(layout: str, options: dict) -> tuple:
    return (layout, *sorted((k, str(v)) for k, v in options.items()))


# (layout, options asked for) -> the planned leg whose output answers it
ANSWERED_BY: dict[tuple, tuple] = {
    _key(layout, asked): _key(layout, ran)
    for layout, ran, asked_for in [
        ("fsdp_tp", {"save": "fsdp_tp.ckpt", "evaluate": 1}, [{"save": "fsdp_tp.ckpt"}, {"evaluate": 1}]),
        ("pp_1f1b", {"save": "pp_1f1b.ckpt", "evaluate": 1}, [{"save": "pp_1f1b.ckpt"}, {"evaluate": 1}]),
        ("single", {"evaluate": 1}, [{}]),
    ]
    for asked in asked_for
}


def _world(layout: str) -> int:
    import model_parallel_run

    return model_parallel_run.LAYOUTS[layout][0]


class Legs:
    """Runs ``model_parallel_run.py`` legs (a layout and KEY=VALUE options) and keeps their outputs.

    The first request runs the whole PLAN; a leg outside it runs alone. A checkpoint path option
    (``save=``/``resume=``) is a name inside this module's folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[tuple, dict | RunFailed] = {}
        self.planned = False

    def __call__(self, layout: str, timeout: float = 180, **options: object) -> dict:
        key = ANSWERED_BY.get(_key(layout, options), _key(layout, options))
        if key not in self.done and not self.planned:
            self.planned = True
            self._run_plan()
        if key not in self.done:
            self._launch([(layout, options)], timeout=timeout)
        saved = self.done[key]
        if isinstance(saved, RunFailed):
            raise saved
        return saved

    def checkpoint(self, layout: str, **options: object) -> tuple[Path, dict]:
        """The run of ``layout`` that saves a checkpoint at the end: (its path, its output)."""
        return self.root / f"{layout}.ckpt", self(layout, save=f"{layout}.ckpt", **options)

    def _run_plan(self) -> None:
        batch: list[tuple[str, dict]] = []
        for layout, options in PLAN:
            if batch and _world(batch[0][0]) != _world(layout):
                self._launch(batch, timeout=120 * len(batch))
                batch = []
            batch.append((layout, options))
        self._launch(batch, timeout=120 * len(batch))

    def _launch(self, legs: list[tuple[str, dict]], *, timeout: float, rerun: bool = True) -> None:
        import json

        specs = []
        for layout, options in legs:
            folder = self.root / "-".join([layout, *(f"{k}={v}" for k, v in sorted(options.items()))])
            folder.mkdir(exist_ok=True)  # there already: a rerun after a crash
            for stale in folder.glob("out.pt.error-*"):  # the crashed launch's
                stale.unlink()
            opts = {k: str(self.root / str(v)) if k in ("save", "resume") else str(v) for k, v in options.items()}
            specs.append([str(folder / "out.pt"), layout, opts])
        batch_file = self.root / f"batch-{len(self.done)}.json"
        batch_file.write_text(json.dumps(specs))
        # Forked, and its workers forks of it: no leg tests how its processes start.
        result = run(str(SCRIPT), "--batch", str(batch_file), timeout=timeout, forked=True, env=FORK_WORKERS)
        said = fatal_signal(result.stderr) if result.returncode else None
        crash = None
        if said is not None:  # in the first leg without its output (rank 0 writes it at the leg's end)
            ran = next((i for i, (out, _, _) in enumerate(specs) if not Path(out).exists()), len(specs) - 1)
            crash = crash_at(ran, [f"{layout} {options}" for layout, options in legs], result.stderr, said)
        if crash is not None and rerun:
            # A native crash (helpers/leg_crashes.py): said, never hidden; the crashed leg and the
            # legs after it run once more, in a launch of their own.
            warnings.warn(LegCrashed(f"{crash.describe()}\nRunning it and the legs after it again."), stacklevel=3)
            for (layout, options), (out, _, _) in zip(legs[: crash.leg], specs):
                self.done[_key(layout, options)] = torch.load(out)
            self._launch(legs[crash.leg :], timeout=timeout, rerun=False)
            return
        for index, ((layout, options), (out, _, _)) in enumerate(zip(legs, specs)):
            errors = sorted(Path(out).parent.glob("out.pt.error-*"))
            if crash is not None and index >= crash.leg:
                failure = RunFailed(f"{layout} {options} did not end well: {crash.describe()}")
            elif errors:
                failure = RunFailed(f"{layout} {options} failed:\n" + errors[0].read_text()[-4000:])
            elif (result.returncode != 0 and crash is None) or not Path(out).exists():
                failure = RunFailed(
                    f"{layout} {options} did not run: its launch exited {result.returncode} "
                    f"(an earlier leg of the batch failed?):\n{result.stderr[-4000:]}"
                )
            else:
                self.done[_key(layout, options)] = torch.load(out)
                continue
            self.done[_key(layout, options)] = failure


def max_difference(saved: dict, reference: dict) -> float:
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)  # every layer came back, under the one-process names
    return max(float((ours[name].double() - theirs[name].double()).abs().max()) for name in theirs)


def assert_matches(saved: dict, reference: dict, *, metrics: tuple[str, ...] = METRICS, steps: int = STEPS) -> None:
    """Same steps, every weight within ATOL, and the named metrics within ATOL."""
    assert saved["steps"] == reference["steps"] == steps
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert ours[name].shape == tensor.shape, name
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")
    for metric in metrics:
        assert metric in saved["metrics"] and metric in reference["metrics"], metric
        assert float(saved["metrics"][metric]) == pytest.approx(float(reference["metrics"][metric]), abs=ATOL), metric


def assert_identical(saved: dict, reference: dict) -> None:
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
