"""Remove what killed saves left behind: trainmesh's own ``.NAME.xxxxxxxx.tmp`` / ``.old`` entries.

A kill during a save leaves a partial ``.tmp`` file or directory (up to the checkpoint's size),
and a kill while an old checkpoint is deleted leaves its ``.old``. Nothing else ever removes
them, so a run clears them at its start, before it saves anything (see the Trainer's fit).

Which ones are safe to delete: only names trainmesh writes (``TEMPORARY_NAME``), and only those
that nothing has modified since this run started (``older_than``): a save in progress keeps
touching its files, so another live run's temporaries stay. What this cannot see is a save of
another live run that wrote nothing at all since this run started; two live runs writing into
one checkpoint folder are not supported anyway (ModelCheckpoint warns about foreign files).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainmesh.checkpoint.formats import UnreadableCheckpoint
from trainmesh.checkpoint.io import TEMPORARY_NAME, delete_entry


def clean_stale_temporaries(folder: str | os.PathLike[str], *, older_than: float) -> list[Path]:
    """Delete trainmesh's temporaries in ``folder`` (not below it) last modified before
    ``older_than`` (a ``time.time()``); returns what was removed or put in place.

    One is kept and finished instead: a complete new distributed checkpoint whose name is free
    while its predecessor sits retired beside it, which is a directory swap that a kill cut in
    two on a file system with no atomic exchange (see ``distributed._replace_directory``).
    """
    directory = Path(folder)
    entries, stale = _stale_temporaries(directory, older_than)
    touched = []
    for path in stale:
        if _finish_interrupted_swap(path, entries):
            touched.append(directory / TEMPORARY_NAME.match(path.name)["name"])  # type: ignore[index]
            continue
        delete_entry(path)
        touched.append(path)
    return touched


def finish_interrupted_swaps(folder: str | os.PathLike[str], *, older_than: float) -> list[Path]:
    """Only the swaps :func:`clean_stale_temporaries` finishes, for a search of ``folder``'s
    checkpoints that runs before the start's cleanup (``fit(ckpt_path="last")`` chooses its file
    before the run's set-up, as Lightning's): the complete new checkpoint in place, nothing deleted;
    returns the checkpoints put in place."""
    entries, stale = _stale_temporaries(Path(folder), older_than)
    finished = [path for path in stale if _finish_interrupted_swap(path, entries)]
    return [path.with_name(TEMPORARY_NAME.match(path.name)["name"]) for path in finished]  # type: ignore[index]


def _stale_temporaries(directory: Path, older_than: float) -> tuple[list[Path], list[Path]]:
    """The folder's entries, and trainmesh's temporaries among them untouched since ``older_than``;
    nothing where the folder is not there (yet) or not a folder."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return [], []
    return entries, [path for path in entries if TEMPORARY_NAME.match(path.name) and _last_modified(path) < older_than]


def _finish_interrupted_swap(path: Path, entries: list[Path]) -> bool:
    match = TEMPORARY_NAME.match(path.name)
    assert match is not None
    target = path.with_name(match["name"])
    retired = [p for p in entries if p.name.startswith(f".{target.name}.") and p.name.endswith(".old")]
    if match["kind"] != "tmp" or not path.is_dir() or os.path.lexists(target) or not retired:
        return False
    from trainmesh.checkpoint.distributed import readable_metadata  # DCP's reader: only for a swap left half-done

    try:
        readable_metadata(path)
    except UnreadableCheckpoint:
        return False  # a save that never finished: deleted like any other temporary
    os.replace(path, target)
    return True


def _last_modified(path: Path) -> float:
    """The newest modification time of ``path`` and, for a directory, of what it holds (a DCP
    directory is flat; a writer appending to a shard changes the shard's time, not the folder's)."""
    try:
        times = [path.lstat().st_mtime]
        if path.is_dir() and not path.is_symlink():
            times += [entry.stat(follow_symlinks=False).st_mtime for entry in os.scandir(path)]
    except OSError:  # removed while we looked: its owner is busy with it
        return float("inf")
    return max(times)
