"""Digests written with every ``torch.save`` archive trainmesh writes, and checked as it is read.

An archive's digest (:class:`ArchiveDigest`) has two parts:
  * ``records``: a CRC-32 over the CRC-32s of every record's bytes, in file order. These are the
    CRC-32s torch's zip writer computes as it writes each record (and keeps in the archive's
    index): they cost the save nothing more. Hashing the bytes a second time would: zlib's CRC-32
    runs at about 3 GB/s here, 12% of the time of a 600 MB save.
  * ``structure``: a CRC-32 of every other byte (the local headers, the index, the end records),
    a few hundred bytes per record read back right after the write, while still in the page cache.
So every byte is covered, and the index that holds the records' CRC-32s is itself checked.

A single file carries its digest in the zip comment, written after everything else and before
the file is renamed into place (``write_trailer``): a save cut short never has one. The file's
first record (``marker.MARKER``) says that it was written with one, so a file that lost its end
is refused, not taken for one without a digest; a file without the marker (older trainmesh,
Lightning, torch.save) and without a digest is checked by its zip CRC-32s alone. Loading
checks the headers and the pickle first, then hashes each record as ``torch.load`` reads it
(:class:`DigestingReader`): one read of the file, not two, and the hashing on other threads
while torch copies the next piece (``crc.py``).
"""

from __future__ import annotations

import io
import os
import struct
import warnings
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainmesh.checkpoint.crc import PieceHasher
from trainmesh.checkpoint.formats import UnreadableCheckpoint
from trainmesh.checkpoint.marker import END_RECORD, END_RECORD_SIZE, TRAILER_MAGIC, trailer_text

_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # signature ... name length, extra length: 30 bytes
_CHUNK = 4 << 20  # hash in pieces that are still in the CPU's cache


class DamagedCheckpoint(UnreadableCheckpoint):
    """A checkpoint whose bytes no longer match the digest (or checksums) written with them."""


@dataclass(frozen=True)
class ArchiveDigest:
    size: int  # the bytes covered: the archive up to (not including) the zip comment's length
    structure: int
    records: int
    count: int

    def encode(self) -> str:
        return f"size={self.size} structure={self.structure:08x} records={self.records:08x} count={self.count}"

    @classmethod
    def decode(cls, text: str) -> ArchiveDigest:
        fields = dict(part.split("=", 1) for part in text.split())
        return cls(int(fields["size"]), int(fields["structure"], 16), int(fields["records"], 16), int(fields["count"]))


@dataclass(frozen=True)
class Record:
    name: str
    start: int  # the first byte of the record's data, in the file
    length: int
    crc: int  # the CRC-32 the archive's index holds for it


class Region(io.RawIOBase):
    """``length`` bytes of an open file from ``base`` on, as a file of their own (for zipfile)."""

    def __init__(self, fd: int, base: int, length: int) -> None:
        super().__init__()
        self.fd, self.base, self.length, self.position = fd, base, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        origin = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.length}[whence]
        self.position = max(0, origin + offset)
        return self.position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        count = max(0, min(len(buffer), self.length - self.position))
        data = os.pread(self.fd, count, self.base + self.position)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def archive_records(fd: int, base: int, length: int) -> list[Record]:
    """The stored records of the ``torch.save`` archive at ``[base, base+length)`` of ``fd``, in file
    order (index and local headers read, not the data). BadZipFile/ValueError when it has no index."""
    with zipfile.ZipFile(Region(fd, base, length)) as archive:
        infos = archive.infolist()
    found = []
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            continue  # not torch's: its bytes count as structure
        header = os.pread(fd, _LOCAL_HEADER.size, base + info.header_offset)
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"no local header for {info.filename} at {info.header_offset}")
        fields = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]
        if start + info.compress_size > length:
            raise zipfile.BadZipFile(f"{info.filename} runs past the end of the archive")
        found.append(Record(info.filename, base + start, info.compress_size, info.CRC))
    return sorted(found, key=lambda record: record.start)


def structure_crc(fd: int, base: int, size: int, records: Iterable[Record]) -> int:
    """CRC-32 of the bytes of ``[base, base+size)`` that no record's data covers, in order."""
    crc, position = 0, base
    for record in records:
        crc = _crc_range(fd, position, record.start - position, crc)
        position = record.start + record.length
    return _crc_range(fd, position, base + size - position, crc)


def records_crc(crcs: Iterable[int]) -> int:
    return zlib.crc32(b"".join(struct.pack("<I", crc) for crc in crcs))


def compute_digest(fd: int, base: int, length: int, *, covered: int | None = None) -> ArchiveDigest:
    """The digest of the archive just written at ``[base, base+length)``, from the CRC-32s torch
    wrote into its index (a record whose CRC-32 torch did not compute, 0, is hashed here) and the
    other bytes, read back. ``covered``: how many bytes from ``base`` the digest covers (all)."""
    records = archive_records(fd, base, length)
    crcs = [r.crc if r.crc or not r.length else crc_of(fd, r.start, r.length) for r in records]
    size = length if covered is None else covered
    return ArchiveDigest(size, structure_crc(fd, base, size, records), records_crc(crcs), len(records))


def crc_of(fd: int, start: int, length: int) -> int:
    return _crc_range(fd, start, length, 0)


def _crc_range(fd: int, start: int, length: int, crc: int) -> int:
    end = start + length
    while start < end:
        data = os.pread(fd, min(_CHUNK, end - start), start)
        if not data:
            raise EOFError(f"the file ends at byte {start}, before {end}")
        crc = zlib.crc32(data, crc)
        start += len(data)
    return crc


def write_trailer(fd: int) -> ArchiveDigest | None:
    """Put the digest of the ``torch.save`` archive that fills the file ``fd`` into its zip comment.

    An archive of a layout this code does not know (a future torch's) is left without a digest,
    with a warning, rather than failing the save (``io.atomic_save`` saves it again, without the
    marker): it loads, checked by its zip CRC-32s."""
    size = os.fstat(fd).st_size
    end = os.pread(fd, END_RECORD_SIZE, max(0, size - END_RECORD_SIZE))
    try:
        if end[:4] != END_RECORD or end[-2:] != b"\x00\x00":
            raise ValueError("the file does not end with a zip end record without a comment")
        digest = compute_digest(fd, 0, size, covered=size - 2)
    except (zipfile.BadZipFile, ValueError) as exc:
        warnings.warn(f"checkpoint saved without a digest (torch {torch.__version__} wrote: {exc})", stacklevel=3)
        return None
    comment = TRAILER_MAGIC + digest.encode().encode("ascii")
    os.pwrite(fd, struct.pack("<H", len(comment)) + comment, size - 2)
    return digest


def read_trailer(fd: int) -> ArchiveDigest | None:
    """The digest in the file's zip comment; None when it has none whole (a file trainmesh did not
    write this way, or one cut short: ``formats.file_problem`` refuses those that start with
    ``marker.MARKER``). DamagedCheckpoint when the comment is trainmesh's but unreadable."""
    size = os.fstat(fd).st_size
    comment = trailer_text(fd)
    if comment is None:
        return None
    try:
        digest = ArchiveDigest.decode(comment[len(TRAILER_MAGIC) :].decode("ascii"))
    except (ValueError, KeyError, UnicodeDecodeError) as exc:
        raise DamagedCheckpoint(f"its digest (the zip comment) is unreadable: {comment[:80]!r}") from exc
    if digest.size != size - len(comment) - 2:
        raise DamagedCheckpoint(
            f"its size changed since the save: {size - len(comment) - 2} bytes before the digest, it records {digest.size}"
        )
    return digest


class DigestingReader(io.RawIOBase):
    """The file ``torch.load`` reads, hashing each read as it lands (in cache-sized pieces, on
    ``hasher``'s threads while the next piece is read): the CRC-32 of every ``(offset, length)``
    read is kept in ``crcs`` for :func:`check_records`."""

    def __init__(self, raw: io.FileIO, hasher: PieceHasher | None = None) -> None:
        super().__init__()
        self.raw, self.hasher = raw, hasher or PieceHasher(workers=0)
        self.crcs: dict[tuple[int, int], int] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        start, done = self.raw.tell(), 0
        pieces: list[Any] = []
        try:
            while done < len(view):
                count = self.raw.readinto(view[done : done + _CHUNK])
                if not count:
                    break
                self.hasher.add(pieces, view[done : done + count])
                done += count
        finally:
            # The buffer is torch's, which may reuse or free it once this returns: hashed before.
            crc = self.hasher.finish(pieces)
        self.crcs[(start, done)] = crc
        return done


def check_records(fd: int, records: list[Record], read: dict[tuple[int, int], int], expected: int) -> str | None:
    """The first record whose bytes do not match, by name (or a sentence when only the digest of all
    of them does not); None when they all match. A record ``torch.load`` read whole is taken from
    ``read``; any other is hashed here."""
    crcs = [
        read[(r.start, r.length)] if (r.start, r.length) in read else crc_of(fd, r.start, r.length) for r in records
    ]
    for crc, record in zip(crcs, records):
        if record.crc and crc != record.crc:
            return f"record {record.name}"
    if records_crc(crcs) != expected:
        return "a record (the digest of the records' checksums differs)"
    return None


def check_structure(fd: int, base: int, digest: ArchiveDigest, length: int) -> tuple[list[Record], str | None]:
    """The archive's records, and what does not match in its headers and index (None: all match)."""
    try:
        records = archive_records(fd, base, length)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
        return [], f"its index ({exc})"
    if len(records) != digest.count or structure_crc(fd, base, digest.size, records) != digest.structure:
        return records, "its headers, index or the digest itself (the zip structure)"
    return records, None


def verify_region(fd: int, base: int, length: int, digest: ArchiveDigest) -> str | None:
    """What of the archive at ``[base, base+length)`` does not match ``digest`` (None: all of it does)."""
    records, bad = check_structure(fd, base, digest, length)
    return bad if bad is not None else check_records(fd, records, {}, digest.records)


def damaged_file(path: os.PathLike[str] | str) -> tuple[str | None, bool]:
    """What of the single ``torch.save`` file no longer matches what was written with it (its digest,
    or without one its zip CRC-32s; None: all matches), and whether it carries a digest."""
    from trainmesh.checkpoint.formats import damaged_record

    with open(path, "rb", buffering=0) as raw:
        fd = raw.fileno()
        try:
            digest = read_trailer(fd)
        except DamagedCheckpoint as exc:
            return str(exc), True
        if digest is not None:
            return verify_region(fd, 0, os.fstat(fd).st_size, digest), True
    bad = damaged_record(Path(path))
    return (None if bad is None else f"record {bad}"), False


def structure_problem(path: os.PathLike[str] | str) -> str | None:
    """Whether the file's headers and index still match its digest (a few KB read, not the records):
    what "last" can afford to check of every candidate. None for a file without a digest."""
    with open(path, "rb", buffering=0) as raw:
        fd = raw.fileno()
        try:
            digest = read_trailer(fd)
        except DamagedCheckpoint as exc:
            return f"{path} is damaged: {exc}"
        if digest is None:
            return None
        bad = check_structure(fd, 0, digest, os.fstat(fd).st_size)[1]
    return None if bad is None else f"{path} is damaged: {bad} no longer matches the digest written with it"
