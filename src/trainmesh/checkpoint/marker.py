"""The record that says "this archive's digest is at its end", written first in every file trainmesh saves.

A digest at the end of a file (``digest.py``: the zip comment) cannot tell, alone, a file that
lost its last bytes from one that never had a digest: a cut removes the digest first. So every
archive trainmesh writes starts with a small record, ``MARKER``, ahead of torch's own records: it
lies in the file's first bytes, which no cut from the end removes without removing everything.
A file that starts with it and does not end with a complete digest was cut short (a copy or
download that did not finish, a disk that lost its tail), whatever the cut; files without it
(older trainmesh, Lightning, ``torch.save``) are told by their ends alone, as before.
``torch.load`` reads records by name and ignores this one.
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
import struct
import warnings
from dataclasses import dataclass
from typing import IO, Any

import torch

MARKER = ".trainmesh_digest"  # the record's name; torch's writer puts "archive/" before it
MARKER_TEXT = b"trainmesh digest v1: this archive's digest is its zip comment, written after every other byte\n"
TRAILER_MAGIC = b"trainmesh-digest "
END_RECORD = b"PK\x05\x06"  # the zip end-of-central-directory record: 22 bytes, the comment's length last
END_RECORD_SIZE = 22
_LOCAL_HEADER = b"PK\x03\x04"
_TAIL = 512  # more than any digest comment (about 80 bytes) and its end record


def save_marked(obj: Any, handle: IO[bytes]) -> bool:
    """``torch.save(obj, handle)`` with ``MARKER`` as the archive's first record; False (and a
    plain ``torch.save``, with a warning) where this torch's serialization is not the one known
    here, so that a torch upgrade never stops a save."""
    serialization = torch.serialization
    if not _known_serialization():
        warnings.warn(
            f"checkpoint saved without trainmesh's marker record (torch {torch.__version__}'s serialization "
            "internals are not the ones trainmesh knows): a copy of it cut short at its end reads as a file "
            "without a digest",
            stacklevel=3,
        )
        torch.save(obj, handle)
        return False
    # torch.save is exactly these two calls (torch 2.x): the marker goes in between.
    with serialization._open_zipfile_writer(handle) as archive:
        archive.write_record(MARKER, MARKER_TEXT, len(MARKER_TEXT))
        serialization._save(obj, archive, pickle, serialization.DEFAULT_PROTOCOL, False)
    return True


@functools.cache
def _known_serialization() -> bool:
    save = getattr(torch.serialization, "_save", None)
    if save is None or not callable(getattr(torch.serialization, "_open_zipfile_writer", None)):
        return False
    expected = ["obj", "zip_file", "pickle_module", "pickle_protocol", "_disable_byteorder_record"]
    return list(inspect.signature(save).parameters) == expected


def starts_with_marker(fd: int) -> bool:
    """Whether the file's first record (its first local header, at byte 0) is ``MARKER``."""
    header = os.pread(fd, 30 + 256, 0)
    if len(header) < 30 or header[:4] != _LOCAL_HEADER:
        return False
    name_length = struct.unpack("<H", header[26:28])[0]
    name = header[30 : 30 + name_length]
    return len(name) == name_length and (name == MARKER.encode() or name.endswith(b"/" + MARKER.encode()))


def file_starts_with_marker(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb", buffering=0) as raw:
            return starts_with_marker(raw.fileno())
    except OSError:
        return False


@dataclass(frozen=True)
class FileEnd:
    comment: bytes  # the bytes after the file's last zip end record
    declared: int  # the comment's length that record declares


def file_end(fd: int) -> FileEnd | None:
    """The file's last zip end record's comment, as found and as declared; None without one."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, min(size, _TAIL), max(0, size - _TAIL))
    at = tail.rfind(END_RECORD)
    if at < 0 or at + END_RECORD_SIZE > len(tail):
        return None
    declared = struct.unpack("<H", tail[at + END_RECORD_SIZE - 2 : at + END_RECORD_SIZE])[0]
    return FileEnd(tail[at + END_RECORD_SIZE :], declared)


def trailer_text(fd: int) -> bytes | None:
    """The file's zip comment when it is whole and is trainmesh's digest (the comment's length as
    its end record declares, starting with ``TRAILER_MAGIC``); None otherwise."""
    end = file_end(fd)
    if end is None or end.declared != len(end.comment) or not end.comment.startswith(TRAILER_MAGIC):
        return None
    return end.comment


def end_problem(fd: int) -> str | None:
    """Why the file's end is not the end it was written with (one clause), or None: its zip
    comment is shorter than its end record declares (any zip), or it starts with ``MARKER`` and
    does not end with a whole digest."""
    end = file_end(fd)
    if end is not None and len(end.comment) < end.declared:
        return (
            f"its zip comment is {len(end.comment)} of the {end.declared} bytes written: the file lost its "
            f"last {end.declared - len(end.comment)} byte(s)"
        )
    if starts_with_marker(fd) and trailer_text(fd) is None:
        return (
            "it starts with trainmesh's marker record, so its save wrote a digest at its end, and its end holds "
            "none: it lost its last bytes (a copy or download that did not finish), or bytes were added after them"
        )
    return None
