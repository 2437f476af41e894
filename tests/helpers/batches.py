"""Several legs of a test program in one launch: one after another in the same processes.

Starting a leg's interpreters (an elastic agent and its workers, each importing torch and
trainmesh), its rendezvous and its teardown cost more than the training of most legs. So a
module lists its legs once (a PLAN) and legs of the same world size run in one launch of
``python PROGRAM --batch SPEC.json``, sharing one process group (the first leg's Trainer makes
it; the next ones use it as it is). Tests of process start-up, start methods, crashes or exit
keep their own launches.

Harness side: ``Batches(program, root, plan, leg_timeout=...)``; ``batches(name)`` runs, on
first use, every launch of the plan up to the one holding ``name`` (a leg may read what an
earlier one wrote) and returns the leg's stderr, or raises ``LegFailed``.

Program side: ``run_batch(spec_file, run_leg)`` where ``run_leg(argv)`` is the program's own
single-leg entry point. Each leg gets its own environment variables (the launch's environment
with the leg's ``env`` on top, none of an earlier leg's), its own stderr (``LOG.stderr-RANK``)
and its own watchdog; a leg that fails writes ``LOG.error-RANK`` and ends the launch, and every
later leg of that launch then fails too, saying so (the legs before it stand: they ran to their end).
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from helpers.forked import can_fork, run_forked, single_threaded
from helpers.leg_crashes import find_crash

WORKERS = "TESTS_WORKERS"  # "fork": run_batch's workers are forks (Batches(fork_workers=True))
# A file path: each rank appends one JSON line per leg, what the leg cost it (getrusage: CPU seconds,
# minor page faults, context switches). For profiling a module's legs; no test sets it.
LEG_RUSAGE = "TESTS_LEG_RUSAGE"


class LegFailed(Exception):
    """A leg failed, or did not run because its launch ended (the message says which)."""


class LegCrashed(UserWarning):
    """A process of a launch died by a fatal signal; its legs from there ran again (the message
    names the leg, the process and the signal, with the process's report)."""


class Batches:
    def __init__(
        self,
        program: Path,
        root: Path,
        plan: list[tuple[str, int, list[str], dict[str, str]] | None],
        *,
        leg_timeout: float,
        cwd: Path | None = None,
        forked: bool = False,
        fork_workers: bool = False,
    ) -> None:
        """``plan``: (name, world size, argv after the program, extra environment) per leg, in the
        order they must run; consecutive legs of one world size share a launch, unless a None
        between them separates them. ``forked``: each launch's first process is a fork of this
        one (helpers/forked.py: no second import of torch), where it can be. ``fork_workers`` (with
        ``forked``): a launch of world > 1 starts its workers as forks of that first process
        (strategy="ddp_fork") instead of new interpreters (torchrun's way, 2.5-3 s of CPU each):
        for legs that depend neither on how their processes start nor on torchrun's variables."""
        names = [leg[0] for leg in plan if leg is not None]
        assert len(set(names)) == len(names), f"two legs of the plan have the same name: {names}"
        self.program, self.root, self.leg_timeout, self.cwd = program, root, leg_timeout, cwd
        self.forked, self.fork_workers = forked, fork_workers
        self.launches: list[list[tuple[str, int, list[str], dict[str, str]]]] = []
        separated = True
        for leg in plan:
            if leg is None:
                separated = True
            elif not separated and self.launches[-1][0][1] == leg[1]:
                self.launches[-1].append(leg)
            else:
                self.launches.append([leg])
                separated = False
        self.outcomes: dict[str, str | LegFailed] = {}
        self._logs = 0  # legs launched so far, reruns included: each leg's logs get a new name

    def __call__(self, name: str) -> str:
        """The leg's stderr (every rank's, rank 0 first) once its launch ran; LegFailed if it failed."""
        assert any(leg[0] == name for launch in self.launches for leg in launch), f"{name} is not in the plan"
        for launch in self.launches:
            if name in self.outcomes:
                break
            if launch[0][0] not in self.outcomes:
                self._launch(launch)
        outcome = self.outcomes[name]
        if isinstance(outcome, LegFailed):
            raise outcome
        return outcome

    def _launch(self, legs: list[tuple[str, int, list[str], dict[str, str]]], *, rerun: bool = True) -> None:
        index = self._logs
        self._logs += len(legs)
        logs = [self.root / f"leg{index + i}" for i in range(len(legs))]
        spec = self.root / f"batch{index}.json"
        spec.write_text(
            json.dumps(
                {"world": legs[0][1], "legs": [[argv, env, str(log)] for (_, _, argv, env), log in zip(legs, logs)]}
            )
        )
        timeout = self.leg_timeout * len(legs)
        err, returncode = self._run(spec, timeout)
        crash = find_crash([name for name, *_ in legs], logs, err) if returncode else None
        if crash is not None and rerun:
            # A native crash (CPU gloo's point-to-point under pipelining, seen once in a loaded CI
            # run): said, never hidden, and the crashed leg and those after it run once more in a
            # launch of their own. The legs before it ran to their end.
            said = f"{crash.describe()}\nRunning {crash.name} and the legs after it again."
            warnings.warn(LegCrashed(said), stacklevel=3)  # at the test's call of batches(name)
            for (name, *_), log in zip(legs[: crash.leg], logs):
                self.outcomes[name] = _stderr(log)
            self._launch(legs[crash.leg :], rerun=False)
            return
        together = ", ".join(name for name, *_ in legs)
        ended = f"exited {returncode}" if returncode is not None else f"was killed after {timeout:.0f}s (its timeout)"
        # The legs before the first that failed ran to their end (legs run one after another).
        failed = [i for i, log in enumerate(logs) if any(log.parent.glob(f"{log.name}.error-*"))]
        failed = sorted([*failed, *([crash.leg] if crash is not None else [])])
        for index, ((name, _, argv, _), log) in enumerate(zip(legs, logs)):
            stderr = _stderr(log)
            errors = sorted(log.parent.glob(f"{log.name}.error-*"))
            if crash is not None and index >= crash.leg:
                # Every leg from the crash on, its own error included (a peer's broken connection).
                self.outcomes[name] = LegFailed(f"{name} ({' '.join(argv)}) did not end well: {crash.describe()}")
            elif errors:
                self.outcomes[name] = LegFailed(f"{name} ({' '.join(argv)}) failed:\n{errors[0].read_text()[-4000:]}")
            elif returncode != 0 and not (failed and index < failed[0]):
                self.outcomes[name] = LegFailed(
                    f"{name} ({' '.join(argv)}) did not end well: its launch ({together}) {ended} (a leg of it failed "
                    f"or hung?); the leg's stderr:\n{stderr[-3000:]}\nthe launch's stderr:\n{err[-3000:]}"
                )
            else:
                self.outcomes[name] = stderr

    def _run(self, spec: Path, timeout: float) -> tuple[str, int | None]:
        """The launch's stderr and exit status (None: killed at ``timeout``)."""
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if self.forked and can_fork():
            if self.fork_workers:
                env[WORKERS] = "fork"
            try:
                result = run_forked(self.program, ["--batch", str(spec)], env=env, timeout=timeout, cwd=self.cwd)
            except subprocess.TimeoutExpired:
                return "", None
            return result.stderr, result.returncode
        process = subprocess.Popen(
            [sys.executable, str(self.program), "--batch", str(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.cwd,
            start_new_session=True,
        )
        try:
            _, err = process.communicate(timeout=timeout)
            return err, process.returncode
        except subprocess.TimeoutExpired:
            return "", None
        finally:
            if process.poll() is None:  # timed out, or the test itself was stopped: no worker outlives it
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()


def run_batch(spec_file: str, run_leg: Callable[[list[str]], object], *, limit: float) -> None:
    """In the program: every leg of the batch, each with its own environment, stderr and watchdog
    (``limit`` seconds). World > 1: this first process is the elastic agent of the workers that run
    them (their parent, as ddp_fork, under ``Batches(fork_workers=True)``)."""
    spec = json.loads(Path(spec_file).read_text())
    world, legs = spec["world"], spec["legs"]
    if world > 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        import trainmesh as tm

        # Only a process of one thread forks its workers (another thread's held lock would be copied
        # held into them); otherwise they start as torchrun's new interpreters.
        if os.environ.get(WORKERS) == "fork" and single_threaded():
            # No watchdog here: its thread would be missing from the forks, and their first
            # dump_traceback_later would wait for it forever. The harness's timeout kills the launch.
            tm.Runtime(accelerator="cpu", strategy="ddp_fork", devices=world).launch(_run_legs, legs, run_leg, limit)
            return
        faulthandler.dump_traceback_later(limit * len(legs), exit=True)  # the agent waits for the whole batch
        tm.Runtime(accelerator="cpu", strategy="ddp", devices=world).launch(_run_legs, legs, run_leg, limit)
        return  # not reached: the agent exits once its workers ran the batch
    _run_legs(legs, run_leg, limit)


def _run_legs(legs: list, run_leg: Callable[[list[str]], object], limit: float) -> None:
    rank = os.environ.get("RANK", "0")
    # A fatal signal (a native crash) writes every thread's native stack (torch's handler, which
    # then calls faulthandler's) and Python stack to descriptor 2: the running leg's stderr below,
    # where Batches finds it (helpers/leg_crashes.py).
    faulthandler.enable(all_threads=True)
    if "torch" in sys.modules:
        sys.modules["torch"]._C._set_print_stack_traces_on_fatal_signal(True)
    base = {name: os.environ.get(name) for _, env, _ in legs for name in env}
    for argv, env, log in legs:
        faulthandler.dump_traceback_later(limit, exit=True)  # per leg: a hang ends the launch
        _set_environment(base)  # this leg's settings, none of an earlier leg's
        os.environ.update(env)
        sys.stdout.flush()
        sys.stderr.flush()
        stderr = os.dup(2)
        with open(f"{log}.stderr-{rank}", "a") as leg_stderr:
            os.dup2(leg_stderr.fileno(), 2)
        before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            run_leg(argv)
        except Exception:  # not SystemExit
            Path(f"{log}.error-{rank}").write_text(traceback.format_exc())
            raise
        finally:
            sys.stderr.flush()
            os.dup2(stderr, 2)
            os.close(stderr)
            _record_rusage(log, argv, rank, before)
    faulthandler.cancel_dump_traceback_later()
    _set_environment(base)


def _stderr(log: Path) -> str:
    """The leg's stderr, every rank's, rank 0 first."""
    return "".join(path.read_text() for path in sorted(log.parent.glob(f"{log.name}.stderr-*")))


def _record_rusage(log: str, argv: list[str], rank: str, before: resource.struct_rusage) -> None:
    if not os.environ.get(LEG_RUSAGE):
        return
    after = resource.getrusage(resource.RUSAGE_SELF)
    fields = ("ru_utime", "ru_stime", "ru_minflt", "ru_majflt", "ru_nvcsw", "ru_nivcsw")
    used = {name[3:]: round(getattr(after, name) - getattr(before, name), 3) for name in fields}
    with open(os.environ[LEG_RUSAGE], "a") as out:
        out.write(json.dumps({"leg": Path(log).name, "argv": argv, "rank": rank, **used}) + "\n")


def _set_environment(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def dispatch(programs: dict[str, Callable[..., object]], argv: list[str]) -> None:
    """Run one program of a ``*_run.py`` file: ``argv`` is NAME ARGS..., NAME a key of the file's
    ``PROGRAMS`` table; the program's function gets ARGS, as strings."""
    name, *args = argv
    if name not in programs:
        raise ValueError(f"unknown program {name!r}: the programs of this file are {', '.join(programs)}")
    programs[name](*args)
