"""``python PROGRAM ARGS`` as a fork of a process that already imported torch and trainmesh.

A test's program run as a new interpreter spends 2-3 s of CPU importing torch and trainmesh
before its first line (more than most legs' training). A fork skips that; it is still a separate
process: its own environment, working directory, stdout/stderr, exit status, and nothing it does
reaches the test's process. A multi-process program forked this way is its elastic agent, as
``python PROGRAM`` would be: the workers it starts are new interpreters running PROGRAM, as under
torchrun.

The fork is not taken of the test process: a pytest worker has threads (xdist's, and whatever
earlier tests left: writers, thread pools, gloo's), and a fork keeps every lock one of them held,
with no thread left to release it. A program forked from one hung at random on a loaded CI
machine. The fork is taken of multiprocessing's fork server instead: one clean, single-threaded
process per test process that imports torch and trainmesh once (``set_forkserver_preload``) and
does nothing else.

Not for a test about how processes start, import or exit (those run the real interpreter).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

# What the fork server imports once, before its first fork: torch and trainmesh, and what the
# first Trainer of a program would import on its own (1.3 s of CPU in each fork): the optimizer's
# torch._dynamo (with sympy), DTensor, FSDP2, DCP and pipelining; and trainmesh's Trainer itself
# with what its first fit reads (`import trainmesh` imports nothing until a name is used: 0.36 s
# of CPU in each fork that builds a Trainer; test_preemption + test_fault_tolerance + test_matrix:
# 65.4 -> 56.3 CPU-s). torch.utils.tensorboard stays out (a logger imports it at its first write,
# which tests/loggers/test_default.py checks in a fork). None of them starts a thread.
PRELOAD = [
    "torch",
    "trainmesh",
    "helpers.forked",
    "torch._dynamo",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch.distributed.checkpoint",
    "torch.distributed.pipelining",
    "trainmesh.trainer.trainer",
    "trainmesh.loggers.tensorboard",
    "trainmesh.hparams_files",
    "trainmesh.trainer.results_table",
    "trainmesh.callbacks.progress.drawing_bar",
]


def can_fork() -> bool:
    """Whether this platform has the fork server (POSIX)."""
    return os.name == "posix" and "forkserver" in multiprocessing.get_all_start_methods()


def single_threaded() -> bool:
    """Whether this process has one thread (native ones counted: /proc/self/task), so that a fork
    of it copies no lock another thread holds. Where threads cannot be counted, False."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def start_workers(fn: Callable[..., None], args: tuple, nprocs: int, *, guard_s: float) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs)`` for a program's reference workers (a
    hand-written torch loop, a harness's own process group) whose start the test is not about:
    as forks of this process where it has one thread (no second import of torch and trainmesh:
    2.5 s of CPU each), else spawned. The program's hang guard (``faulthandler.dump_traceback_later``)
    runs a thread, which a fork would copy stopped and its own guard would wait for forever: it is
    stopped while the workers fork (each arms its own), then armed again for ``guard_s`` seconds."""
    import faulthandler

    import torch.multiprocessing

    faulthandler.cancel_dump_traceback_later()
    fork = "fork" in multiprocessing.get_all_start_methods() and single_threaded()
    workers = torch.multiprocessing.start_processes(
        fn, args=args, nprocs=nprocs, join=False, start_method="fork" if fork else "spawn"
    )
    faulthandler.dump_traceback_later(guard_s, exit=True)
    while not workers.join():
        pass


def _fork_server() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def forkserver_strategy() -> object:
    """``DDPStrategy(start_method="forkserver")`` (Lightning 2.6's name) with this process's fork
    server preloading PRELOAD: for a ddp_spawn test about results, not about how spawn starts,
    each worker is a fork of a process that imported torch and trainmesh once per test process,
    not a new interpreter that imports them (about 5 CPU-s a worker). Set before the server's
    first start; a server already running (started by _fork_server) has the same preload."""
    from trainmesh.strategies import DDPStrategy

    _fork_server()
    return DDPStrategy(start_method="forkserver")


def run_forked(
    program: Path,
    args: list[str],
    *,
    env: dict[str, str],
    timeout: float,
    cwd: Path | None = None,
    world: int = 1,
    torchrun: bool = False,
    preload: tuple[str, ...] = (),
    nodes: int = 1,
) -> subprocess.CompletedProcess:
    """As ``subprocess.run([sys.executable, PROGRAM, *ARGS], env=env, cwd=cwd, capture_output=True,
    text=True, timeout=timeout)`` with the program in a new session: on timeout the session
    (its workers included) is killed and TimeoutExpired raised. ``world`` > 1: as torchrun
    would run it on ``world`` processes, each a fork in one process group (ddp_fork's), where
    the program's Trainer or Runtime of ``world`` devices finds its processes already started
    (for a program that does not test how they start). ``torchrun`` (world > 1): the ``world``
    forks get torchrun's variables and no process group, as ``torchrun --nproc-per-node WORLD``
    workers (another framework's run, Lightning's, which then starts none itself); the first rank
    that fails stops the others, as torchrun's agent does; ``nodes`` > 1: as ``nodes`` torchrun
    agents of ``world // nodes`` workers each on one host (the node rank in GROUP_RANK, the rank
    within it in LOCAL_RANK), their workers forks all the same. ``preload`` (world > 1): modules the
    program imports (``lightning.pytorch``), imported once by the fork before it forks its ``world``
    ranks (``_import_before_ranks``) instead of once in each rank."""
    started = start_forked(
        program, args, env=env, cwd=cwd, world=world, torchrun=torchrun, preload=preload, nodes=nodes
    )
    return started.wait(timeout)


def start_forked(
    program: Path,
    args: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    world: int = 1,
    torchrun: bool = False,
    preload: tuple[str, ...] = (),
    nodes: int = 1,
) -> Forked:
    """``run_forked`` without the wait, as ``subprocess.Popen`` is ``subprocess.run`` without it:
    for programs that run at once (replica groups that train together); ``Forked.wait`` collects
    one, ``Forked.kill`` stops one (its whole session) at once."""
    return Forked(program, args, env=env, cwd=cwd, world=world, torchrun=torchrun, preload=preload, nodes=nodes)


class Forked:
    """A program started by ``start_forked``: ``poll()``, ``wait(timeout)``, ``kill()``."""

    def __init__(
        self,
        program: Path,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: Path | None,
        world: int,
        torchrun: bool = False,
        preload: tuple[str, ...] = (),
        nodes: int = 1,
    ) -> None:
        self.command = [sys.executable, str(program), *args]
        self._folder = tempfile.TemporaryDirectory(prefix="forked-")
        self._out, self._err = Path(self._folder.name, "stdout"), Path(self._folder.name, "stderr")
        target_args = (str(program), args, env, cwd, self._out, self._err, world, torchrun, preload, nodes)
        self._child = _fork_server().Process(target=_child, args=target_args)
        self._child.start()

    @property
    def pid(self) -> int:
        """Its process id, also its session's and process group's (for a test that signals it)."""
        return self._child.pid

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        return self._child.exitcode

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """Its exit status and output once it ends; past ``timeout`` seconds its session is killed
        and TimeoutExpired raised (as ``subprocess.run``'s)."""
        timed_out = True
        try:
            self._child.join(timeout)
            timed_out = self._child.exitcode is None
        finally:
            if self._child.exitcode is None:  # timed out, or the test itself was stopped: no worker outlives it
                self.kill()
        try:
            out, err = self._out.read_text(), self._err.read_text()
        finally:
            self._folder.cleanup()
        if timed_out:
            raise subprocess.TimeoutExpired(self.command, timeout, out, err)
        return subprocess.CompletedProcess(self.command, self._child.exitcode, out, err)

    def kill(self) -> None:
        """Stop it and its workers (its session) now, if it still runs."""
        if self._child.exitcode is not None:
            return
        try:
            os.killpg(self._child.pid, signal.SIGKILL)
        except ProcessLookupError:  # killed before its setsid: no group of its own yet
            self._child.kill()
        self._child.join()


def _import_before_ranks(modules: tuple[str, ...], world: int) -> None:
    """Import ``modules`` in the forked program's first process, with the program's environment,
    before it forks its ranks: each rank then has them as a fork, not importing them again
    (``lightning.pytorch``: 2.6 CPU-s in each rank). Not in the fork server, whose forks include
    programs that must not have them (trainmesh's side, tests of what trainmesh imports). What the
    import reads from a rank's own variables is read again in each rank (``_read_rank_again``)."""
    if world < 2:  # one process: the program's own import costs the same
        return
    import importlib

    for module in modules:
        importlib.import_module(module)


def _read_rank_again() -> None:
    """What an import done before this rank had its variables (``_import_before_ranks``) read from
    them, read again as the rank's own import would: Lightning's ``rank_zero_only.rank``
    (lightning/fabric/utilities/rank_zero.py sets it at import from RANK, LOCAL_RANK, SLURM_PROCID
    or JSM_NAMESPACE_RANK, else 0; a strategy sets it again at its setup), so that rank 1's
    ``rank_zero_info`` before its Trainer's setup stays quiet there as under torchrun."""
    if "lightning.fabric.utilities.rank_zero" in sys.modules:
        rank_zero = sys.modules["lightning.fabric.utilities.rank_zero"]
        rank_zero.rank_zero_only.rank = rank_zero._get_rank() or 0


def _run_main(program: str) -> None:
    _read_rank_again()
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exit_:  # a worker's sys.exit(0) is a normal end, as a script's
        if exit_.code not in (0, None):
            raise


def _run_as_torchrun(program: str, world: int, nodes: int = 1) -> None:
    """``program``'s ``world`` ranks as forks of this process with the variables torchrun gives its
    workers, ``world // nodes`` on each of ``nodes`` nodes (rank r on node r // that); the first
    rank that fails stops the others (torchrun's agents do), and its exit status is this process's."""
    from trainmesh.launchers.environments import find_free_port

    port = os.environ.get("MASTER_PORT") or str(find_free_port())
    if world % nodes:
        raise ValueError(f"world={world} is not a whole number of processes on each of {nodes} nodes")
    per_node = world // nodes
    ranks: dict[int, int] = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                node, local = divmod(rank, per_node)
                os.environ.update(
                    {"RANK": str(rank), "LOCAL_RANK": str(local), "GROUP_RANK": str(node), "ROLE_RANK": str(rank)}
                )
                os.environ.update(
                    {"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(per_node), "ROLE_WORLD_SIZE": str(world)}
                )
                os.environ["GROUP_WORLD_SIZE"] = str(nodes)
                os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "forked"})
                _run_main(program)
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        ranks[pid] = rank
    failed = 0
    while ranks:
        pid, status = os.wait()
        del ranks[pid]
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and not failed:
            failed = code if code > 0 else 1
            print(f"forked rank failed ({code}); stopping the others", file=sys.stderr)
            for other in ranks:
                os.kill(other, signal.SIGKILL)
    if failed:
        raise SystemExit(failed)


def _child(
    program: Path,
    args: list[str],
    env: dict[str, str],
    cwd: Path | None,
    out: Path,
    err: Path,
    world: int,
    torchrun: bool = False,
    preload: tuple[str, ...] = (),
    nodes: int = 1,
) -> None:
    # Everything the fork server imported (torch, trainmesh, dynamo, DTensor ...: most of this heap)
    # out of the collector's reach: each full collection here, automatic or explicit (the fork
    # launcher's, Keras' clear_session()), scanned it all (about 0.2 CPU-s each, and touching each
    # object copied its page), 18.1 of test_matrix.py's 43.6 CPU-s. Nothing the program makes is
    # frozen; the server's own objects live until this process exits anyway. (In the server, as a
    # PRELOAD module, it could not run: the server imports before it has the tests' sys.path.)
    gc.freeze()
    code = 1
    try:
        os.setsid()  # its own session, as start_new_session=True: killed as a group on timeout
        for fd, path in ((1, out), (2, err)):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # not pytest's capture
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(env)
        # multiprocessing made this process the fork server's child and its start method
        # "forkserver"; a new interpreter has the platform's default. Left so, the program's own
        # children (a DataLoader's workers) were the fork server's: outside the program's session,
        # watching the fork server for their parent's death, so they outlived a program that died
        # hard (resume_run.py's stop leg, loader-workers), holding the fork server open.
        multiprocessing.set_start_method(None, force=True)
        if "torch" in sys.modules and env.get("OMP_NUM_THREADS", "").isdigit():
            # A new interpreter's torch reads its thread count from the environment at import.
            sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [str(program), *args]
        sys.path.insert(0, str(Path(program).parent))  # as the interpreter does for a script
        _import_before_ranks(preload, world)
        if world > 1:
            import trainmesh as tm

            if not single_threaded():  # a fork would copy another thread's held locks: a random hang
                raise RuntimeError(
                    f"the forked program has {len(os.listdir('/proc/self/task'))} threads before its workers fork"
                    + (f" (after importing {', '.join(preload)}: give it OMP_NUM_THREADS=1)" if preload else "")
                )
            if torchrun:
                _run_as_torchrun(str(program), world, nodes)
            else:
                tm.Runtime(accelerator="cpu", strategy="ddp_fork", devices=world).launch(_run_main, str(program))
        else:
            _run_main(str(program))
        code = 0
    except SystemExit as exit_:
        if isinstance(exit_.code, int) or exit_.code is None:
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # none of the test process's exit handlers
