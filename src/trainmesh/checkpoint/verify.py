"""Check a checkpoint (a single file or a distributed directory) without loading it into a model.

The same checks every load runs (``formats.file_problem``, ``distributed.readable_metadata``:
complete, not a partial or temporary save; then the digest written with every file and item, see
``digest.py``, or where there is none the CRC-32s written with the records), file by file, so a
copy can be checked before a run depends on it: ``trainmesh checkpoint verify PATH``.
No tensor is unpickled; every byte of every record is read once.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainmesh.checkpoint.digest import damaged_file
from trainmesh.checkpoint.distributed import STATE_FILE, damaged_shard, readable_metadata
from trainmesh.checkpoint.formats import UnreadableCheckpoint, file_problem
from trainmesh.checkpoint.shard_digest import DIGEST_FILE

# The exit statuses of `trainmesh checkpoint verify`.
OK = 0
DAMAGED = 1  # complete, but bytes no longer match the checksums written with them
NOT_A_CHECKPOINT = 2  # missing, partial (an interrupted save), truncated, or not a checkpoint at all


@dataclass
class Verdict:
    """What a verify found: ``status`` (OK, DAMAGED, NOT_A_CHECKPOINT) and one line per file checked,
    ending with the line that sums it up."""

    status: int = OK
    lines: list[str] = field(default_factory=list)


def verify_checkpoint(path: str | os.PathLike[str]) -> Verdict:
    source = Path(path)
    if not source.exists():
        return Verdict(NOT_A_CHECKPOINT, [f"{source} does not exist (absolute: {source.resolve()})"])
    verdict = _verify_directory(source) if source.is_dir() else _verify_file(source)
    if verdict.status == OK:
        verdict.lines.append(f"ok: {source} is complete and every checksum matches")
    return verdict


def _verify_file(source: Path) -> Verdict:
    problem = file_problem(source)
    if problem is not None:
        return Verdict(NOT_A_CHECKPOINT, [problem])
    verdict = Verdict()
    _check_archive(source, source.name, verdict)
    return verdict


def _check_archive(file: Path, label: str, verdict: Verdict) -> None:
    """One line for the ``torch.save`` archive ``file``: DAMAGED when its bytes no longer match the
    digest written with them (a file without one: its records' zip CRC-32s)."""
    bad, has_digest = damaged_file(file)
    against = "the digest" if has_digest else "the checksum"
    if bad is not None:
        verdict.status = DAMAGED
        verdict.lines.append(
            f"{label}: DAMAGED: {file} {bad} no longer matches {against} written with it "
            "(bytes changed on disk or in a copy after the save); use an earlier checkpoint, or copy it again"
        )
        return
    with zipfile.ZipFile(file) as archive:
        records = len(archive.infolist())
    checked = "digest" if has_digest else "zip CRC-32s, no digest"
    verdict.lines.append(f"{label}: ok ({records} records, {_megabytes(file)}, {checked})")


def _verify_directory(source: Path) -> Verdict:
    try:
        metadata = readable_metadata(source)  # complete: metadata, state file, every shard long enough
    except UnreadableCheckpoint as exc:
        return Verdict(NOT_A_CHECKPOINT, [str(exc)])
    verdict = Verdict()
    _check_archive(source / STATE_FILE, STATE_FILE, verdict)
    checked = "digest" if (source / DIGEST_FILE).exists() else "zip CRC-32s, no digest"
    storage = getattr(metadata, "storage_data", None) or {}
    shards = sorted({info.relative_path for info in storage.values()})
    for name in shards:
        # damaged_shard checks the items of the metadata it is handed: this shard's alone.
        items = {index: info for index, info in storage.items() if info.relative_path == name}
        bad = damaged_shard(source, _Metadata(storage_data=items))
        if bad is not None:
            verdict.status = DAMAGED
            verdict.lines.append(f"{name}: DAMAGED: {bad}")
        else:
            verdict.lines.append(f"{name}: ok ({len(items)} items, {_megabytes(source / name)}, {checked})")
    return verdict


class _Metadata(SimpleNamespace):
    """The part of DCP's metadata ``damaged_shard`` reads (``storage_data``)."""

    storage_data: dict[Any, Any]


def _megabytes(file: Path) -> str:
    return f"{file.stat().st_size / 1e6:.1f} MB"
