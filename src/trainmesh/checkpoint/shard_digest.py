"""Digests of a distributed (DCP) checkpoint's files, and the reader that checks them as it loads.

DCP writes each item (a tensor or a shard of one) as a ``torch.save`` archive of its own inside a
rank's shard file, so each item gets the digest a single file gets (``digest.ArchiveDigest``: the
CRC-32s torch's writer computed as it wrote, and a CRC-32 of the archive's other bytes), and
``.metadata`` a CRC-32 of its bytes. Rank 0 writes them all to ``DIGEST_FILE`` after DCP's files and
the state file (which carries its own digest), inside the staging directory, before the directory
takes its name: a save cut short never has one. A directory without one (older trainmesh) is
checked by the items' zip CRC-32s, as before.

Each rank checks only the items it is about to read (:class:`VerifyingReader`), all of them before
it copies any into the model: a damaged shard never leaves a model half-loaded.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainmesh.checkpoint.digest import ArchiveDigest, DamagedCheckpoint, compute_digest, crc_of, verify_region
from trainmesh.checkpoint.formats import damaged_record

DIGEST_FILE = "trainmesh_digest.json"
METADATA_FILE = ".metadata"
DIGEST_VERSION = 1

Item = tuple[str, int, int, str]  # shard file, offset, length, the entry's name


def items_of(metadata: Any) -> list[Item]:
    """Every stored item DCP's metadata names, by shard and offset."""
    storage = getattr(metadata, "storage_data", None) or {}
    return sorted({(info.relative_path, info.offset, info.length, index.fqn) for index, info in storage.items()})


def write_digests(directory: Path, metadata: Any) -> None:
    """Write ``DIGEST_FILE`` into the complete (not yet renamed) checkpoint ``directory``."""
    shards: dict[str, dict[str, Any]] = {}
    handles: dict[str, int] = {}
    try:
        for name, offset, length, _ in items_of(metadata):
            if name not in handles:
                handles[name] = os.open(directory / name, os.O_RDONLY)
                shards[name] = {"size": os.fstat(handles[name]).st_size, "items": {}}
            fd = handles[name]
            archive = os.pread(fd, 4, offset) == b"PK\x03\x04"
            entry = (
                {"digest": compute_digest(fd, offset, length).encode()}
                if archive
                else {"crc32": crc_of(fd, offset, length)}
            )
            shards[name]["items"][str(offset)] = {"length": length, **entry}
    finally:
        for fd in handles.values():
            os.close(fd)
    meta = (directory / METADATA_FILE).read_bytes()
    table = {
        "version": DIGEST_VERSION,
        METADATA_FILE: {"size": len(meta), "crc32": zlib.crc32(meta)},
        "shards": shards,
    }
    with open(directory / DIGEST_FILE, "w", encoding="ascii") as handle:
        json.dump(table, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def read_digests(directory: Path) -> dict[str, Any] | None:
    """The digests of a checkpoint directory, after checking ``.metadata`` against them; None when
    it has none (written before trainmesh wrote digests)."""
    path = directory / DIGEST_FILE
    try:
        table = json.loads(path.read_bytes())
        expected = table[METADATA_FILE]
        shards = table["shards"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise DamagedCheckpoint(_message(directory, f"its digest file {path} is unreadable ({exc})")) from exc
    meta = (directory / METADATA_FILE).read_bytes()
    if len(meta) != expected["size"] or zlib.crc32(meta) != expected["crc32"]:
        raise DamagedCheckpoint(
            _message(directory, f"its {METADATA_FILE} no longer matches the digest written with it")
        )
    return dict(shards)


def damaged_item(directory: Path, items: Iterable[Item], digests: dict[str, Any] | None) -> str | None:
    """The first of ``items`` whose bytes no longer match the digest written with them (or, without
    digests, the zip CRC-32s), as a message naming the shard; None when all match. One read of each."""
    handles: dict[str, int] = {}
    try:
        for name, offset, length, fqn in sorted(set(items)):
            if name not in handles:
                handles[name] = os.open(directory / name, os.O_RDONLY)
            bad = _check_item(handles[name], offset, length, None if digests is None else digests.get(name))
            if bad is not None:
                against = "the checksums" if digests is None else "the digest"
                return (
                    f"{directory} is damaged: shard {directory / name} no longer matches {against} written with it "
                    f"(entry {fqn!r}, bytes {offset}-{offset + length}, {bad}): bytes changed on disk or in a copy "
                    "after the save. Nothing was loaded; resume from an earlier checkpoint of the run (ckpt_path=its "
                    "path), or copy the directory again from where it was written"
                )
    finally:
        for fd in handles.values():
            os.close(fd)
    return None


def _check_item(fd: int, offset: int, length: int, shard: dict[str, Any] | None) -> str | None:
    if shard is None:  # no digests: the item's own zip CRC-32s, when it is a torch.save archive
        data = os.pread(fd, length, offset)
        if not data.startswith(b"PK\x03\x04"):
            return None  # a raw or transformed item: left to DCP
        bad = damaged_record(io.BytesIO(data))
        return None if bad is None else f"record {bad}"
    entry = shard["items"].get(str(offset))
    if entry is None or entry["length"] != length:
        return "an item the digest file does not list"
    if "crc32" in entry:
        return None if crc_of(fd, offset, length) == entry["crc32"] else "its bytes"
    return verify_region(fd, offset, length, ArchiveDigest.decode(entry["digest"]))


def _message(directory: Path, what: str) -> str:
    return (
        f"{directory} is damaged: {what} (bytes changed on disk or in a copy after the save). Nothing was "
        "loaded; resume from an earlier checkpoint of the run (ckpt_path=its path), or copy the directory again"
    )
