"""Checkpoints damaged in place, as a bad disk or copy leaves them: the size and the zip index
unchanged, so only a digest (or the records' CRC-32s) can tell."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def flip_largest_tensor_bytes(source: Path, target: Path | None = None) -> None:
    """Flip 64 bytes inside ``source``'s largest tensor record and write the result to ``target``
    (``source`` itself by default). Its headers and index (all that choosing "last" reads) stay intact."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        record = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    # The record's data follows its local header (30 bytes, the name, the extra field).
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26 : record.header_offset + 30])
    start = record.header_offset + 30 + name_length + extra_length
    for offset in range(start, start + min(64, record.file_size)):
        data[offset] ^= 0x5A
    (source if target is None else target).write_bytes(bytes(data))
