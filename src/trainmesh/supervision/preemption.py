"""Preemption: on SIGTERM or SIGUSR1 every process finishes the same step, saves, and exits 75.

SIGTERM is what SLURM, Kubernetes and torch's elastic agent send before they kill a process;
SIGUSR1 is what SLURM's ``--signal=USR1@SECONDS`` sends before the time limit. During ``fit``
either one only sets a flag (work done inside a signal handler, a collective or a file write, can
deadlock against the code it interrupted). The loop looks at the flag after every step; the
processes agree on the step to stop after (``stop_agreement.py``: one small all_reduce about
every quarter second of training, so within about half a second), then save the full training state
to ``<default_root_dir>/last-preempted-<program>.ckpt`` (a collective, like every save), and exit with
status 75 (``launchers/exit_status.py``). Under SLURM, SIGUSR1 also requeues the job. ``<program>`` is a
short hash of the program (``trainer/run_identity.py``: its command line, module class and which fit of
the process it is), so that programs preempted in one folder each keep their own state; the file a
previous release wrote, ``last-preempted.ckpt``, is still found, resumed by its own program and retired.

The next start resumes by itself: ``fit`` with ``ckpt_path=None`` resumes from the newest
complete checkpoint of the run, whatever its name (``last-preempted-<program>.ckpt``, a ``last.ckpt``, or the
default callback's ``epoch=E-step=S.ckpt``), when the previous run was preempted (that file exists), when an elastic
agent restarted the workers (``TORCHELASTIC_RESTART_COUNT`` > 0), or when SLURM requeued the job
(``SLURM_RESTART_COUNT`` > 0). A fit that then ends normally removes its ``last-preempted-<program>.ckpt``,
so that the following run of the script starts afresh.

>>> # sbatch --signal=USR1@90 --requeue train.sh; in train.py, as always:
>>> # trainer.fit(model, datamodule=dm)   # stops, saves and requeues on USR1; resumes when requeued
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from trainmesh.checkpoint.io import remove_checkpoint
from trainmesh.launchers import exit_status
from trainmesh.launchers.base import ProcessInfo
from trainmesh.launchers.environments import requeue_slurm_job
from trainmesh.launchers.environments import restart_reason as restart_reason_of_launch
from trainmesh.utilities.exceptions import SIGTERMException
from trainmesh.utilities.lightning_loggers import lightning_named_logger

if TYPE_CHECKING:
    from trainmesh.supervision.stop_agreement import StopAgreement

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)

# The name before each program had its own (``last-preempted-<program>.ckpt``): still read. A "last" name,
# as the new ones: ckpt_path="last" finds them too.
PREEMPTION_CHECKPOINT = "last-preempted.ckpt"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(SIGTERMException):
    """Raised on every process after a preemption checkpoint is saved: the program exits with
    status 75 (``exit_status.PREEMPTED``) unless the script catches it."""

    def __init__(self, report: str, *, checkpoint: str, step: int, signal_name: str) -> None:
        super().__init__(exit_status.PREEMPTED)
        self.report, self.checkpoint, self.step, self.signal_name = report, checkpoint, step, signal_name


class SignalStop:
    """What SIGTERM and SIGUSR1 do during one ``fit``: see the module's docstring."""

    def __init__(self) -> None:
        self._received = 0  # the largest signal number received (SIGTERM 15 beats SIGUSR1 10)
        self._agreement: StopAgreement | None = None
        self._process, self._folder, self._name = ProcessInfo(), "", PREEMPTION_CHECKPOINT
        self._save: Callable[[str], None] | None = None  # while armed

    @contextlib.contextmanager
    def armed(self, process: ProcessInfo, *, folder: str, name: str, save: Callable[[str], None]) -> Iterator[None]:
        """Catch the stop signals while the block runs; the previous handlers afterwards. On a
        stop, ``save(path)`` writes the checkpoint (a collective) to ``folder/name``: the program's own."""
        # Each fit starts afresh (one service serves every fit of a Runtime).
        self._received, self._agreement = 0, None
        self._process, self._folder, self._name, self._save = process, folder, name, save
        if threading.current_thread() is not threading.main_thread():
            # Python runs signal handlers in the main thread only, and only it may install them.
            yield
            return
        if process.world_size > 1:  # one process has no one to agree with: the module is not imported
            from trainmesh.supervision.stop_agreement import StopAgreement

            self._agreement = StopAgreement()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            if self._agreement is not None:
                self._agreement.close()
            self._agreement = None
            self._save = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Nothing but the flag: the loop acts on it at the next step's end.
        self._received = max(self._received, signum)

    @property
    def received_sigterm(self) -> bool:
        """Whether this fit received SIGTERM (Lightning's ``trainer.received_sigterm``)."""
        return self._received == signal.SIGTERM

    def stop_agreed(self) -> bool:
        """After a step: whether every process stops now (the same answer on each one)."""
        if self._agreement is None:
            return self._received != 0
        return self._agreement.exchange(self._received) != 0

    def save_and_exit(self, *, step: int, epoch: int) -> NoReturn:
        """Save the training state as it is after this step, report, and raise ``Preempted``."""
        agreed = self._agreement.settle() if self._agreement is not None else self._received
        name = exit_status.describe_signal(agreed)
        process = self._process
        path = os.path.join(self._folder, self._name)
        assert self._save is not None, "save_and_exit runs inside armed()"
        self._save(path)  # a collective: every process has stopped after the same step
        who = "every process" if process.world_size > 1 else "training"
        report = (
            f"{who} stopped after step {step} (epoch {epoch}) and "
            f"the checkpoint {path} is saved; exit status {exit_status.PREEMPTED}. Run the same command "
            "again: fit resumes from it"
        )
        if agreed == signal.SIGUSR1 and process.is_global_zero:
            requeued = requeue_slurm_job()
            report += f". {requeued}" if requeued else ""
        # trainmesh's own agent prints the report as it exits (once per node); else rank 0 does.
        from trainmesh.launchers.agent_link import tell_agent_preempted  # here: a run without the agent never needs it

        told_agent = process.local_rank == 0 and tell_agent_preempted(report)
        if process.is_global_zero and not told_agent:
            print(f"trainmesh: stopped by {name}: {report}", file=sys.stderr, flush=True)
        raise Preempted(report, checkpoint=path, step=step, signal_name=name)

    def finish_fit(self, *, step: int, epoch: int, owned: Callable[[str], bool] | None = None) -> None:
        """After the loop: a signal that came after the last step still saves and exits; a fit
        that ends normally retires the preemption checkpoint it may have resumed from, its own or one
        under the previous release's name (where ``owned`` says it is this program's: another
        program's next run resumes from its own)."""
        agreed = self._agreement.settle(self._received) if self._agreement is not None else self._received
        if agreed:
            self.save_and_exit(step=step, epoch=epoch)
        if not self._process.is_global_zero:
            return
        for path in preemption_checkpoints(self._folder, self._name):
            if os.path.exists(path) and (owned is None or owned(path)):
                # Kept, the next run of the script would resume from it instead of starting afresh.
                remove_checkpoint(path)  # a distributed one is a folder: never seen half-deleted
                log.info(f"trainmesh: training finished; removed {path}, the preempted run's checkpoint")


def preemption_checkpoints(folder: str, name: str) -> list[str]:
    """Where a program's preemption checkpoint may be in ``folder``: its own name, then the one
    name every program shared before (a state the previous release wrote, perhaps another program's)."""
    return [os.path.join(folder, name)] + (
        [os.path.join(folder, PREEMPTION_CHECKPOINT)] if name != PREEMPTION_CHECKPOINT else []
    )


def restart_reason(folder: str, name: str) -> str | None:
    """Why this process resumes rather than starts afresh: an elastic restart or a SLURM requeue
    (the launcher's answer), or a preemption checkpoint in ``folder`` (the program's ``name``, or the
    previous release's); None on a first start."""
    preempted = any(os.path.exists(path) for path in preemption_checkpoints(folder, name))
    return restart_reason_of_launch() or ("the previous run was preempted" if preempted else None)
