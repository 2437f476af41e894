"""The checkpoint a run loads, read on every process: fit's ``ckpt_path`` (a path, "last" or
"best"), the automatic resume after a restart, a preemption or a requeue, and the weights that
validate/test/predict load.

"last" and the automatic resume fall back past a checkpoint that turns out damaged as it loads:
choosing reads its headers and index only, loading checks every tensor byte against the digest
written with it (``checkpoint/load_checks.py``, ``shard_digest.py``). The next newest complete
checkpoint of the run is loaded instead, with a warning naming both, so a run that a scheduler
restarts loses one checkpoint interval, not the job. A checkpoint the user named (a path, "best")
still stops the run: they chose that file.

Global rank 0 chooses; every process reads; every process's outcome is gathered before anything
is decided, so all of them fall back together and resume from the same file (a process resuming
from another file would train on, silently apart). A damaged distributed checkpoint may already
have been loaded in place on the processes whose shards were sound: the next checkpoint overwrites
all of it, and with none left the run stops rather than start over from such a mix.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from trainmesh.checkpoint import DamagedCheckpoint, LastCheckpoints, check_weights_only, checkpoint_entries
from trainmesh.trainer import own_saves, run_identity
from trainmesh.trainer.checkpoint_paths import checkpoint_places, resolve_ckpt_path
from trainmesh.trainer.last_checkpoint import fit_last_checkpoint
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from trainmesh.checkpoint import CheckpointPlaces
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_state import LoopState

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)

Read = Callable[[str], dict[str, Any]]  # one checkpoint, read on this process


def say_restoring(source: str) -> None:
    """Lightning's line as its checkpoint connector starts on a checkpoint (``resume_start``)."""
    rank_zero_info(f"Restoring states from the checkpoint path at {source}")


def say_restored(source: str, *, fitting: bool) -> None:
    """Lightning's line once the checkpoint is restored (``resume_end``): a fit's whole state, or
    the weights validate/test/predict load."""
    rank_zero_info(f"{'Restored all states' if fitting else 'Loaded model weights'} from the checkpoint at {source}")


def read_fit_checkpoint(
    trainer: TrainerView, runtime: Runtime, ckpt_path: str | os.PathLike[str] | None, read: Read
) -> tuple[str | None, dict[str, Any] | None]:
    """The checkpoint ``fit(ckpt_path=...)`` resumes from and its contents; (None, None) for a
    fresh start. Without ``ckpt_path``: a first start, or after a preemption, a restart or a
    requeue what ``Trainer(exact_resume=True)``'s ``ckpt_path="last"`` finds (see
    ``supervision/preemption.py``). A resume the program names without exact_resume: "last" is
    Lightning's, the newest ``last`` file of this fit's checkpoint folders (``trainer/last_checkpoint.py``)."""
    if ckpt_path is None:
        restart = _restart(trainer, runtime)
        if restart is None:
            return None, None
        reason, foreign = restart
        places = dataclasses.replace(
            checkpoint_places(trainer),
            announce_as=f"trainmesh: {reason}",
            excluded=own_saves.written_here(),
            foreign=foreign,
        )
        source, checkpoint = _read_last(places, runtime, read, allow_fresh_start=True)
        if source is None and trainer.is_global_zero:  # the line naming a checkpoint found came from LastCheckpoints
            log.info(
                f"trainmesh: {reason}, but there is no checkpoint to resume from: training starts from the "
                "beginning. Save periodic checkpoints (ModelCheckpoint(save_last=True, every_n_train_steps=N)) "
                "so that a restart resumes"
            )
        return source, checkpoint
    # a restart, a requeue or the run after a preemption keeps trainmesh's search for a named "last" too: its new
    # logger version folder holds no last.ckpt, so Lightning's rule would start the restarted run over
    lightning_last = str(ckpt_path) == "last" and getattr(trainer, "_named_resume", False)
    restart = _restart(trainer, runtime) if lightning_last else None
    if lightning_last and restart is None:
        chosen = _agreed(runtime, functools.partial(fit_last_checkpoint, trainer) if runtime.is_global_zero else None)
        return (None, None) if chosen is None else (chosen, read(chosen))
    if restart is not None:  # after a restart: what the earlier attempt left, not this process's own saves
        places = dataclasses.replace(checkpoint_places(trainer), excluded=own_saves.written_here(), foreign=restart[1])
        return _read_last(places, runtime, read, allow_fresh_start=True)
    if str(ckpt_path) == "last":
        return _read_last(checkpoint_places(trainer), runtime, read, allow_fresh_start=True)
    source = resolve_ckpt_path(trainer, ckpt_path)
    assert source is not None  # None only for "last"
    return source, read(source)


def select_named_last(trainer: TrainerView, runtime: Runtime, ckpt_path: str | None, module: Any) -> str | None:
    """Lightning's ``_select_ckpt_path`` for a ``fit(ckpt_path="last")`` resumed as Lightning's, run as
    its ``fit`` runs it: before the run's set-up, so its warning where there is no last file comes
    before the setup hooks' (ModelCheckpoint's "directory exists and is not empty"), and the folders
    searched are the Trainer's callbacks' (a module's ``configure_callbacks`` join later, as in Lightning).
    The chosen file, or None to start afresh, on every process (global rank 0 chooses). Any other
    ``ckpt_path``, and "last" after a restart (trainmesh's search of the run: :func:`read_fit_checkpoint`
    after the set-up, which needs the module), is returned as given."""
    if str(ckpt_path) != "last" or not getattr(trainer, "_named_resume", False):
        return ckpt_path
    # the fit about to start: its module is not attached yet, and it is not counted yet (stage_setup.py)
    upcoming = run_identity.this_run(module, fit=run_identity.next_fit())
    if _restart_reason(runtime, str(trainer.default_root_dir), run_identity.preemption_name(upcoming)) is not None:
        return ckpt_path
    return _agreed(runtime, functools.partial(fit_last_checkpoint, trainer) if runtime.is_global_zero else None)


Foreign = Callable[[dict[str, Any]], "str | None"]  # why a checkpoint belongs to another run, or None


def _restart_reason(runtime: Runtime, folder: str, name: str) -> tuple[str, str | None] | None:
    """Any process's reason to restart (``name``: this program's preemption file in ``folder``), with
    its launcher's restart key; an elastic agent counts only its own node's restarts (a collective:
    every process calls it)."""
    reason = runtime.supervision.restart_reason(folder, name)
    mine = (reason, run_identity.launch_restart_key()) if reason else None
    return next((r for r in runtime.all_gather_object(mine) if r), None)


def _restart(trainer: TrainerView, runtime: Runtime) -> tuple[str, Foreign] | None:
    """Why this run restarts (an elastic restart, a requeue, the run after a preemption) and which
    checkpoints are its own (``run_identity.py``), or None; any process's reason counts: an elastic
    agent counts only its own node's restarts. A preemption checkpoint another program left is no
    reason: this fit starts afresh and leaves it to that program."""
    current = run_identity.this_run(trainer.lightning_module)
    folder, name = str(trainer.default_root_dir), run_identity.preemption_name(current)
    found = _restart_reason(runtime, folder, name)
    if found is None:
        return None
    reason, key = found
    markers = runtime.supervision.preemption_checkpoints(folder, name)
    marker = _agreed(runtime, functools.partial(_marker_run, markers, current) if runtime.is_global_zero else None)
    runs = [] if marker is None else [marker]  # a launcher restart of a run that resumed a preemption resumes it too
    if key is not None:
        runs.insert(0, {key: current[key]})
    elif marker is None:
        return None  # the marker is another program's
    return reason, run_identity.owner_check(current, runs)


def _marker_run(markers: list[str], current: run_identity.Run) -> dict[str, str | None] | None:
    """The launcher ids of the preempted run whose checkpoint marks default_root_dir (``markers``: the
    program's own name, then the previous release's shared one), where that is this program's; None
    without one, or (said) where another program left it."""
    for path in markers:
        if not os.path.exists(path):
            continue
        saved = checkpoint_entries(path)
        if isinstance(saved, str):  # damaged: the choice skips it with a warning; its run cannot be read
            return {}
        why = run_identity.other_program(saved, current)
        if why is None:
            return run_identity.launch_ids(saved[run_identity.RUN_KEY])
        log.info(f"trainmesh: {path} is not this program's preemption checkpoint ({why}): left for its own program")
    return None


def watch_preemption(
    trainer: TrainerView, runtime: Runtime, module: Any, *, save: Callable[[str], None]
) -> AbstractContextManager[None]:
    """During a fit: SIGTERM/SIGUSR1 save this program's preemption checkpoint in default_root_dir (its
    name ``run_identity.preemption_name``: the automatic resume finds it there) and exit 75."""
    name = run_identity.preemption_name(run_identity.this_run(module))
    return runtime.supervision.stop_signals(runtime.process, folder=str(trainer.default_root_dir), name=name, save=save)


def owned_by(module: Any) -> Callable[[str], bool]:
    """Whether the preemption checkpoint at a path is this program's, to retire when its fit ends
    (another program's stays: its next run resumes from it); an unreadable one is retired."""

    def owned(path: str) -> bool:
        saved = checkpoint_entries(path)
        return isinstance(saved, str) or run_identity.other_program(saved, run_identity.this_run(module)) is None

    return owned


_DEFERRED = "trainmesh_read_after_configure_optimizers"


def read_fit_checkpoint_early(
    trainer: TrainerView, runtime: Runtime, ckpt_path: str | os.PathLike[str] | None, read: Read
) -> tuple[str | None, dict[str, Any] | None] | None:
    """:func:`read_fit_checkpoint` before ``configure_optimizers``, for Lightning's order (the
    module's ``on_load_checkpoint`` before its optimizers are built); None where the checkpoint is
    a distributed (sharded) one: its optimizer states load into the optimizers' own layout, so it
    is read after ``configure_optimizers``, which is Lightning's order for sharded checkpoints too."""

    def file_only(source: str) -> dict[str, Any]:
        return {_DEFERRED: True} if os.path.isdir(source) else read(source)  # a distributed checkpoint: a folder

    source, checkpoint = read_fit_checkpoint(trainer, runtime, ckpt_path, file_only)
    return None if checkpoint is not None and checkpoint.get(_DEFERRED) else (source, checkpoint)


def restore_early(
    trainer: TrainerView, runtime: Runtime, state: LoopState, read: Read, ckpt_path: str | None, early: list[Any]
) -> bool:
    """Lightning 2.6.6's order for a resumed fit where the strategy does not restore after setup
    (its ``restore_checkpoint_after_setup``; fsdp's and model parallel's do): the module's
    ``on_load_checkpoint``, the weights and the callbacks before ``configure_optimizers``, so that
    layers unfrozen there reach the optimizer. Appends (source, checkpoint) to ``early`` where it
    read one, and says whether it restored one; a sharded checkpoint is left to be read after
    ``configure_optimizers``, as before."""
    from trainmesh.trainer.checkpoint_paths import clear_interrupted_saves
    from trainmesh.trainer.checkpointing import restore_modules

    if runtime.capabilities.restore_checkpoint_after_setup:
        return False
    clear_interrupted_saves(trainer, ckpt_path)  # before this run saves anything
    found = read_fit_checkpoint_early(trainer, runtime, ckpt_path, read)
    if found is None:
        return False
    source, checkpoint = found
    if checkpoint is not None and source is not None:
        say_restoring(source)
        restore_modules(state, runtime, trainer, checkpoint, source=source, weights_only=False, early=True)
    early.append((source, checkpoint))
    return checkpoint is not None


def read_weights_checkpoint(
    trainer: TrainerView,
    runtime: Runtime,
    ckpt_path: str | os.PathLike[str],
    read: Read,
    places: CheckpointPlaces | None = None,
) -> tuple[str, dict[str, Any]]:
    """The checkpoint validate/test/predict(ckpt_path=...) load weights from, and its contents
    (``places``: where "best"/"last" were known as the run began, trainer/checkpoint_paths.py)."""
    if str(ckpt_path) == "last":
        source, checkpoint = _read_last(places or checkpoint_places(trainer), runtime, read, allow_fresh_start=False)
    else:
        source = resolve_ckpt_path(trainer, ckpt_path, places=places)
        checkpoint = None if source is None else read(source)
    assert source is not None and checkpoint is not None  # "last" without a checkpoint raised
    return source, checkpoint


@dataclasses.dataclass(frozen=True)
class StageCheckpoints:
    """How one stage of a Trainer reads checkpoints: with the stage's ``weights_only`` (Lightning's
    ``torch.load`` refusals first), into the module and, for a fit, the optimizers it has then."""

    trainer: TrainerView
    runtime: Runtime
    state: LoopState
    weights_only: bool | None
    places: CheckpointPlaces | None = (
        None  # validate/test/predict: "best"/"last" as the run began (checkpoint_paths.py)
    )

    def read(self, source: str, *, with_optimizers: bool) -> dict[str, Any]:
        from trainmesh.trainer.checkpointing import TENSOR_ENTRIES

        check_before_reading(source, self.weights_only)
        optimizers = self.state.optimizers if with_optimizers else []
        return self.runtime.checkpoints.read(source, self.trainer.model, optimizers, keys=TENSOR_ENTRIES)

    def restore_early(self, ckpt_path: str | None, early: list[Any]) -> bool:
        """A resumed fit's module before ``configure_optimizers``, where the strategy allows
        (:func:`restore_early`): read without the optimizers, which do not exist yet."""
        read = functools.partial(self.read, with_optimizers=False)
        return restore_early(self.trainer, self.runtime, self.state, read, ckpt_path, early)

    def load_weights_for_eval(self, ckpt_path: str | os.PathLike[str] | None) -> None:
        """validate/test/predict(ckpt_path=...): the checkpoint's weights into the module, with
        Lightning's lines before and after."""
        from trainmesh.trainer.checkpointing import restore_checkpoint

        if ckpt_path is None:
            self.state.ckpt_path = None  # Lightning's trainer.ckpt_path after a run that loaded none
            return
        read = functools.partial(self.read, with_optimizers=False)
        source, checkpoint = read_weights_checkpoint(self.trainer, self.runtime, ckpt_path, read, self.places)
        self.state.ckpt_path = source
        say_restoring(source)
        restore_checkpoint(self.state, self.runtime, self.trainer, checkpoint, source=source, weights_only=True)
        say_restored(source, fitting=False)


class _FoundDamaged(Exception):
    """The checkpoint read is damaged for at least one process (its message says where)."""


def _read_last(
    places: CheckpointPlaces, runtime: Runtime, read: Read, *, allow_fresh_start: bool
) -> tuple[str | None, dict[str, Any] | None]:
    chooser = LastCheckpoints(places, allow_fresh_start=allow_fresh_start) if runtime.is_global_zero else None
    source = _agreed(runtime, None if chooser is None else chooser.first)
    damaged: list[str] = []
    while source is not None:
        try:
            return source, _read_everywhere(runtime, read, source)
        except _FoundDamaged as exc:
            damaged.append(str(exc))
            why = _short(str(exc)).removeprefix(f"{source} is damaged: ")
            source = _agreed(runtime, None if chooser is None else functools.partial(chooser.after_damage, source, why))
    if damaged:
        raise DamagedCheckpoint(
            f"{damaged[-1]}. ckpt_path='last' found no other complete checkpoint of the run to fall back to "
            f"(damaged: {'; '.join(_short(d) for d in damaged)}). trainmesh does not start over from "
            "scratch here: a damaged distributed checkpoint may already be partly loaded. Pass "
            "ckpt_path=None after moving the damaged checkpoints away to start over"
        )
    return None, None


def _read_everywhere(runtime: Runtime, read: Read, source: str) -> dict[str, Any]:
    """``source`` read on every process. _FoundDamaged (on every process) when any process found
    it damaged; another failure on any process is raised on every process, naming it."""
    error: Exception | None = None
    checkpoint: dict[str, Any] | None = None
    try:
        checkpoint = read(source)
    except Exception as exc:  # noqa: BLE001 - told to every process below, then raised
        error = exc
    # A damaged file may be damaged for some processes only (each node reading its own copy; a
    # distributed checkpoint's ranks reading their own shards): decide on everyone's outcome.
    outcome = None if error is None else (isinstance(error, DamagedCheckpoint), str(error))
    outcomes = cast("list[tuple[bool, str] | None]", runtime.all_gather_object(outcome))
    failed = [(rank, o) for rank, o in enumerate(outcomes) if o is not None]
    other = next(((rank, why) for rank, (is_damage, why) in failed if not is_damage), None)
    if other is not None:
        if error is not None:
            raise error
        raise RuntimeError(f"process {other[0]} could not read the checkpoint {source}: {other[1]}")
    if failed:
        raise _FoundDamaged(failed[0][1][1])
    assert checkpoint is not None
    return checkpoint


_T = TypeVar("_T")


def _agreed(runtime: Runtime, choose: Callable[[], _T | None] | None) -> _T | None:
    """Global rank 0's answer (``choose`` is None on the others), on every process; an error rank 0
    met while choosing is raised on every process (the others would otherwise wait for an answer)."""
    answer: tuple[_T | None, Exception | None] = (None, None)
    if choose is not None:
        try:
            answer = (choose(), None)
        except Exception as exc:  # noqa: BLE001 - raised below, on every process
            answer = (None, exc)
    path, error = runtime.broadcast(answer, src=0)
    if error is not None:
        raise answer[1] if answer[1] is not None else error
    return cast("_T | None", path)


def _short(message: str) -> str:
    """A damage message without its advice (resume from an earlier checkpoint: done here)."""
    cut = message.find("bytes changed on disk")
    return message[:cut].rstrip(" (:") if cut > 0 else message


def check_before_reading(source: str, weights_only: bool | None) -> None:
    """What Lightning does before it reads a checkpoint to restore: its ``torch.load(weights_only=)``
    refusals (checkpoint/weights_only.py). Its line naming the file: say_restoring."""
    check_weights_only(source, weights_only)
