"""Which run wrote a checkpoint, and whether an automatic resume may take it.

Several programs often share one ``default_root_dir`` (a sweep's jobs, a train and a finetune script,
two models trained one after the other). An automatic resume (an elastic restart, a SLURM requeue,
the run after a preemption) must take only what the earlier attempt of *this* run saved: another
program's newest checkpoint handed the restarted model its weights and step (measured: program A
restarted after program B saved in the same folder resumed B's ``epoch=2-step=12.ckpt`` and trained
nothing; with other shapes the load failed). Every checkpoint the Trainer writes records its run
(:data:`RUN_KEY`): the launcher's id of the job, which stays the same across its restarts
(``TORCHELASTIC_RUN_ID``: torchrun's ``--rdzv-id``, trainmesh's own agent's; ``SLURM_JOB_ID``), and
the program (its command line, the LightningModule's class, and which ``fit`` of the process it is:
a script that trains models one after another in one job, a sweep, re-runs its fits in order).

An elastic restart takes the checkpoints of the same elastic run id, a SLURM requeue those of the same
job id, the run after a preemption those of the preempted run (the marker's own record); the program
must match in every case. A checkpoint without a record (older trainmesh, Lightning) is never resumed
automatically: which run wrote it cannot be known. Each checkpoint left alone is named in one line;
``fit(ckpt_path=...)`` loads any file the program names. trainmesh.keras's preemption state records
and matches the same record (``keras/preemption.py``; its fit number is ``tk.fit``'s own count).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

RUN_KEY = "trainmesh_run"
ELASTIC, SLURM = "elastic_run", "slurm_job"  # the launchers' ids of one job, kept across its restarts
_PROGRAM = ("command", "module", "fit")

Run = dict[str, Any]
_fits = 0  # the Trainer.fit calls this process has made


def next_fit() -> int:
    """The number the next fit of this process will record (before :func:`stage_started` counts it)."""
    return _fits + 1


def stage_started(stage: str) -> None:
    """A Trainer stage starts in this process; a fit's checkpoints record it as the next fit."""
    global _fits
    _fits += stage == "fit"


def this_run(module: Any, environ: Mapping[str, str] | None = None, *, fit: int | None = None) -> Run:
    """The record of the run this process belongs to (what a checkpoint it writes stores); ``fit``:
    which fit of the process it is, where not the Trainer's (trainmesh.keras counts its own)."""
    env = os.environ if environ is None else environ
    elastic = env.get("TORCHELASTIC_RUN_ID") or None
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-") else ""
    kind = type(module)
    return {
        # torchrun's default --rdzv-id is "none" for every job: it ties nothing together
        ELASTIC: None if elastic == "none" else elastic,
        SLURM: env.get("SLURM_JOB_ID") or None,
        # the script's absolute path and its arguments (a sweep's runs differ in them)
        "command": [os.path.abspath(script) if script else script, *sys.argv[1:]],
        "module": kind.__qualname__,  # not its import path: a script's classes are __main__'s
        "fit": _fits if fit is None else fit,
    }


def preemption_name(run: Run) -> str:
    """The file name of this program's preemption checkpoint (state): ``last-preempted-<hash>.ckpt``,
    the hash of what makes the program the same one (its command, module class and fit number), so
    that programs preempted in one folder each keep theirs, and its next run finds it again."""
    digest = hashlib.sha256(repr([run[key] for key in _PROGRAM]).encode()).hexdigest()[:10]
    return f"last-preempted-{digest}.ckpt"


def launch_restart_key(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher id that ties this restart to its earlier attempt (the order of
    ``launchers.environments.restart_reason``), or None where no launcher restarted this run."""
    env = os.environ if environ is None else environ
    for variable, key in (("TORCHELASTIC_RESTART_COUNT", ELASTIC), ("SLURM_RESTART_COUNT", SLURM)):
        count = env.get(variable, "0")
        if count.isdigit() and int(count) > 0:
            return key
    return None


def other_program(saved: Any, current: Run) -> str | None:
    """Why the checkpoint contents ``saved`` come from another program than ``current``'s, or None."""
    record = saved.get(RUN_KEY) if isinstance(saved, dict) else None
    if not isinstance(record, dict):
        return "it records no run (written by Lightning or an older trainmesh), so which run wrote it is unknown"
    for key in _PROGRAM:
        if record.get(key) != current[key]:
            return f"written by another program or fit of it ({key} {record.get(key)!r}; here {current[key]!r})"
    return None


def owner_check(current: Run, runs: list[dict[str, str | None]]) -> Callable[[Any], str | None]:
    """The check an automatic resume applies to each checkpoint: the same program, and the launcher
    ids of one of ``runs`` (the earlier attempts': this launch's, a preempted run's) equal."""

    def foreign(saved: Any) -> str | None:
        why = other_program(saved, current)
        if why is not None:
            return why
        record = saved[RUN_KEY]
        if any(all(record.get(key) == value for key, value in run.items()) for run in runs):
            return None
        ids = {key: record.get(key) for run in runs for key in run}
        return f"written by another run (its {ids}, this run's: {' or '.join(str(run) for run in runs)})"

    return foreign


def launch_ids(record: Mapping[str, Any]) -> dict[str, str | None]:
    """The launcher ids of a run's record."""
    return {key: record.get(key) for key in (ELASTIC, SLURM)}
