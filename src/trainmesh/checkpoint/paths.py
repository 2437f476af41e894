"""Which checkpoint a ``ckpt_path`` names: "last" (the newest complete one an earlier run of
this set-up left), "best", or a path; and where an earlier run may have saved.

File-system work only (no collective): the Trainer gathers the folders to search into a
:class:`CheckpointPlaces` and asks here; it agrees across ranks itself.

A checkpoint is a file, or a directory (a distributed checkpoint: fsdp, sharded, hsdp,
model-parallel). trainmesh's own temporaries (``.NAME.xxxx.tmp`` while saving, ``.NAME.xxxx.old``
while replacing) are never checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from trainmesh.checkpoint.cleanup import clean_stale_temporaries
from trainmesh.checkpoint.digest import structure_problem
from trainmesh.checkpoint.formats import UnreadableCheckpoint, file_problem
from trainmesh.checkpoint.io import TEMPORARY_NAME
from trainmesh.checkpoint.layout import STATE_FILE, is_distributed_checkpoint
from trainmesh.utilities.lightning_loggers import lightning_named_logger

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)


@dataclasses.dataclass(frozen=True)
class CheckpointPlaces:
    """Where an earlier run of this set-up may have saved, and what this run's checkpoint
    callback knows of its own saves."""

    folders: tuple[str, ...]  # searched with everything below them (nested ones are searched once)
    last_known: str = ""  # the checkpoint callback's last_model_path
    best_known: str = ""  # the checkpoint callback's best_model_path
    stage: str = ""  # what asks: fit, validate, test or predict (named in errors)
    announces: bool = True  # this process warns and prints (global rank 0)
    announce_as: str = "ckpt_path='last'"  # what the line naming the checkpoint found starts with
    # absolute paths "last" never names: a restart's own process's saves (another fit's: trainer/own_saves.py)
    excluded: frozenset[str] = frozenset()
    # an automatic resume's owner check: why a checkpoint's contents belong to another run, or None
    foreign: Callable[[dict[str, Any]], str | None] | None = None


def resolve_checkpoint(
    ckpt_path: str | os.PathLike[str], places: CheckpointPlaces, *, allow_fresh_start: bool = False
) -> str | None:
    """Turn "last" / "best" into a file, and check that a given path exists.

    "last" is the complete checkpoint furthest in training of this run's checkpoint folder,
    whatever its name (see :func:`_last_candidates`); one that is torn or incomplete is skipped,
    with a warning naming it. A line on the announcing rank names the file chosen. With ``allow_fresh_start`` (fit), "last" with no checkpoint anywhere returns
    None after a one-line notice: a script that a scheduler restarts passes ``ckpt_path="last"``
    from its very first run on (with only damaged ones, a warning names them too). A named file
    that is missing, "best" with none known, and "last" for validate/test/predict (which need
    trained weights) stay errors.
    """
    path = str(ckpt_path)
    if path == "last":
        return LastCheckpoints(places, allow_fresh_start=allow_fresh_start).first()
    if path == "best":
        path = places.best_known
        if not path:
            raise ValueError(
                "ckpt_path='best': no best checkpoint is known for this trainer. Pass the file's "
                "path, or enable ModelCheckpoint(save_last=True) in the earlier run"
            )
    if not os.path.exists(path):
        raise FileNotFoundError(  # Lightning's words first (its TorchCheckpointIO.load_checkpoint)
            f"Checkpoint file not found: {path}. ckpt_path={path!r} does not exist (looked at "
            f"{os.path.abspath(path)}); pass a checkpoint file written by trainmesh, 'last' or 'best'"
        )
    return path


class LastCheckpoints:
    """What "last" names: the newest complete checkpoint (:meth:`first`), and when that one turns
    out damaged as it loads (its tensor bytes no longer match its digest, which choosing does not
    read), the next newest complete one (:meth:`after_damage`), in the same order.

    File-system work on the announcing process only; the caller shares each answer with the others.
    """

    def __init__(self, places: CheckpointPlaces, *, allow_fresh_start: bool) -> None:
        self._places, self._allow_fresh_start = places, allow_fresh_start
        self._skipped: list[str] = []
        self._left_alone: list[str] = []  # other runs' checkpoints, with why (places.foreign)
        known = places.last_known
        self._scan = scan_checkpoints(places.folders)
        if places.excluded:
            found = {path: at for path, at in self._scan.found.items() if os.path.abspath(path) not in places.excluded}
            self._scan = dataclasses.replace(self._scan, found=found)
            known = "" if known and os.path.abspath(known) in places.excluded else known
        self._candidates = _last_candidates(
            self._scan,
            known if known and os.path.exists(known) else "",
            self._skipped,
            places.foreign,
            self._left_alone,
        )

    def first(self) -> str | None:
        """The newest complete checkpoint, named in one line; None (fit only) when there is none."""
        places = self._places
        for candidate in self._candidates:
            if places.announces and self._skipped:
                warnings.warn(
                    f"ckpt_path='last': skipped what is not a complete checkpoint ({'; '.join(self._skipped)}); "
                    f"resuming from the newest complete one, {candidate.path}",
                    UserWarning,
                    stacklevel=6,
                )
            self._announce(candidate)
            return candidate.path
        self._none_found()
        return None

    def after_damage(self, damaged: str, why: str) -> str | None:
        """The next newest complete checkpoint after ``damaged`` (which failed to load: ``why``),
        with a warning naming both; None when there is no other (the caller stops: see
        ``trainer/resume.py``)."""
        self._skipped.clear()
        for candidate in self._candidates:
            if self._places.announces:
                warnings.warn(
                    f"{self._places.announce_as}: {damaged} is damaged ({why}), so it was not loaded; "
                    f"resuming from the next newest complete checkpoint, {candidate.path}"
                    + (f" (also skipped: {'; '.join(self._skipped)})" if self._skipped else ""),
                    UserWarning,
                    stacklevel=6,
                )
            self._announce(candidate)
            return candidate.path
        return None

    def _announce(self, candidate: Candidate) -> None:
        self._say_left_alone()
        if self._places.announces:
            verb = "resuming from" if self._allow_fresh_start else "loading"
            log.info(f"{self._places.announce_as}: {verb} {candidate.path} ({candidate.describe()})")

    def _say_left_alone(self) -> None:
        if self._places.announces and self._left_alone:
            log.info(
                f"{self._places.announce_as}: left alone {len(self._left_alone)} checkpoint(s) of other runs: "
                f"{'; '.join(self._left_alone)}. Pass fit(ckpt_path=PATH) to resume one of them"
            )
            self._left_alone.clear()

    def _none_found(self) -> None:
        self._say_left_alone()
        skipped, places = self._skipped, self._places
        where = " or ".join(self._scan.searched)
        if not self._allow_fresh_start:
            found_none = (
                f"no readable checkpoint ({'; '.join(skipped)})" if skipped else f"no checkpoint found under {where}"
            )
            raise ValueError(
                f"ckpt_path='last': {found_none}, and {places.stage or 'this stage'} "
                "needs trained weights. Pass a checkpoint file's path, or fit first (the default checkpointing, "
                "ModelCheckpoint(), writes one)"
            )
        if places.announces:
            if skipped:  # never silently: every checkpoint there is damaged, and this run starts over
                warnings.warn(
                    f"ckpt_path='last': no complete checkpoint; skipped {'; '.join(skipped)}",
                    UserWarning,
                    stacklevel=7,
                )
            log.info(
                f"ckpt_path='last': no {'complete ' if skipped else ''}checkpoint found under {where}; "
                "starting from scratch"
            )


def checkpoint_problem(path: str) -> str | None:
    """Why ``path`` is not a readable checkpoint (one message), or None; reads indexes, not tensors.

    A checkpoint trainmesh wrote carries its digest inside (a file's zip comment, a directory's
    digest file, both written before the checkpoint takes its name), so a complete checkpoint
    never lacks one it should have: one without (older trainmesh, Lightning) is checked as before.
    """
    if is_distributed_checkpoint(path):
        from trainmesh.checkpoint.distributed import readable_metadata  # DCP's reader: a directory only

        try:
            readable_metadata(Path(path))
        except UnreadableCheckpoint as exc:
            return str(exc)
        return None
    # A file's digest: its headers and index, a few KB (the records are checked when it loads).
    return file_problem(Path(path)) or structure_problem(path)


def remove_interrupted_saves(
    folders: list[str], ckpt_path: str | os.PathLike[str] | None, places: CheckpointPlaces, *, older_than: float
) -> list[Path]:
    """Delete the temporaries that killed saves left (see ``cleanup.py``) in ``folders`` (where
    this run saves) and where it resumes from: the folders ``places`` searches for "last", or the
    named checkpoint's folder. Only what nothing modified since ``older_than`` is deleted."""
    folders = list(folders)
    if ckpt_path is not None and str(ckpt_path) == "last":
        folders += scan_checkpoints(places.folders).folders
    elif ckpt_path is not None and str(ckpt_path) != "best":
        folders.append(os.path.dirname(os.path.abspath(ckpt_path)))
    return [
        path for folder in dict.fromkeys(folders) for path in clean_stale_temporaries(folder, older_than=older_than)
    ]


@dataclasses.dataclass
class Scan:
    searched: list[str]  # the folders searched, each with everything below it
    found: dict[str, float]  # every visible *.ckpt file or checkpoint directory -> when it was completed
    folders: list[str]  # the folders that hold a checkpoint or a trainmesh temporary


def scan_checkpoints(folders: tuple[str, ...] | list[str]) -> Scan:
    """Every checkpoint under ``folders`` (an earlier run's), and the folders that hold one."""
    folders = list(dict.fromkeys(os.path.abspath(folder) for folder in folders))
    folders = [f for f in folders if not any(f.startswith(other + os.sep) for other in folders)]
    found: dict[str, float] = {}
    holding: dict[str, None] = {}  # ordered set
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in files:
                if name.endswith(".ckpt") and not name.startswith("."):
                    found[os.path.join(root, name)] = os.path.getmtime(os.path.join(root, name))
                if name.endswith(".ckpt") or TEMPORARY_NAME.match(name):
                    holding[root] = None
            descend = []
            for name in dirs:
                path = os.path.join(root, name)
                if TEMPORARY_NAME.match(name):  # a staging or retired checkpoint directory
                    holding[root] = None
                elif name.endswith(".ckpt") and is_distributed_checkpoint(path):
                    holding[root] = None
                    found[path] = _completed_at(path)
                else:  # a checkpoint's insides hold no further checkpoints
                    descend.append(name)
            dirs[:] = descend
    return Scan(searched=folders, found=found, folders=list(holding))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A complete checkpoint and the training position it records."""

    path: str
    global_step: int
    epoch: int
    resumable: bool  # a full checkpoint, not a weights-only one
    completed_at: float

    def describe(self) -> str:
        kind = "" if self.resumable else ", weights only"
        return f"epoch {self.epoch}, global step {self.global_step}{kind}"


def _last_candidates(
    scan: Scan,
    known: str,
    skipped: list[str],
    foreign: Callable[[dict[str, Any]], str | None] | None = None,
    left_alone: list[str] | None = None,
) -> Iterator[Candidate]:
    """The complete checkpoints "last" may name, best first, whatever their names (a kill during
    the first last.ckpt write leaves a complete top-k file; one during a later one, a top-k file
    newer than last.ckpt). The folder of the most recently completed checkpoint (this run's)
    comes first, then the others; within a folder, the furthest training position recorded in
    the file (global step, then epoch; the completion time breaks ties), full checkpoints before
    weights-only ones. What is not a complete checkpoint is skipped, its reason added to ``skipped``;
    what ``foreign`` says belongs to another run is left alone, its reason added to ``left_alone``.
    """
    found = dict(scan.found)
    if known:
        found.setdefault(known, os.path.getmtime(known))
    folders: dict[str, list[str]] = {}
    newest_first = sorted(found, key=lambda path: (path == known, found[path]), reverse=True)
    for path in newest_first:
        folders.setdefault(os.path.dirname(path), []).append(path)
    for paths in folders.values():
        complete: list[Candidate] = []
        for path in paths:
            position = _training_position(path, found[path], foreign)
            if isinstance(position, _OtherRun):
                (left_alone if left_alone is not None else skipped).append(position.why)
            elif isinstance(position, str):
                skipped.append(position)
            else:
                complete.append(position)
        yield from sorted(complete, key=lambda c: (c.resumable, c.global_step, c.epoch, c.completed_at), reverse=True)


@dataclasses.dataclass(frozen=True)
class _OtherRun:
    why: str  # names the checkpoint


def checkpoint_entries(path: str) -> dict[str, Any] | str:
    """The entries of the checkpoint at ``path`` (tensors memory-mapped, not read), or why it is
    not a complete trainmesh checkpoint. Reads the index and the small entries only."""
    problem = checkpoint_problem(path)
    if problem is not None:
        return problem
    source = os.path.join(path, STATE_FILE) if is_distributed_checkpoint(path) else path
    try:
        saved = torch.load(source, map_location="cpu", weights_only=False, mmap=True)
    except Exception as exc:  # noqa: BLE001 - whatever fails to unpickle is not a checkpoint to resume from
        return f"{path} is not a readable trainmesh checkpoint ({type(exc).__name__}: {str(exc)[:200]})"
    if not isinstance(saved, dict):
        return f"{path} does not hold a checkpoint dict (found {type(saved).__name__})"
    return saved


def _training_position(
    path: str, completed_at: float, foreign: Callable[[dict[str, Any]], str | None] | None = None
) -> Candidate | _OtherRun | str:
    """The position ``path`` records, or why it is not a complete trainmesh checkpoint, or (with
    ``foreign``) why it belongs to another run."""
    saved = checkpoint_entries(path)
    if isinstance(saved, str):
        return saved
    if foreign is not None and (why := foreign(saved)) is not None:
        return _OtherRun(f"{path}: {why}")
    # One without a position (another framework's, say) comes after those with one; loading it
    # then says what it is (formats.content_problem).
    step, epoch = saved.get("global_step"), saved.get("epoch")
    resumable = not saved.get("weights_only") and "loop" in saved
    return Candidate(path, _number(step), _number(epoch), resumable, completed_at)


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _is_last_name(name: str) -> bool:
    return name.startswith("last") and name.endswith(".ckpt")


def _completed_at(path: str) -> float:
    """When the distributed checkpoint at ``path`` was completed (an incomplete one: when last
    touched, so that "last" names it when it skips it)."""
    # The state file is written last, inside the staging directory, just before the rename: its
    # time is the save's (a directory's own mtime need not change when it is renamed into place).
    times = [os.path.join(path, STATE_FILE), path]
    return max((os.path.getmtime(t) for t in times if os.path.exists(t)), default=0.0)
