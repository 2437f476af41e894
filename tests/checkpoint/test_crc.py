"""The CRC-32 a load checks, hashed in pieces on other threads (checkpoint/crc.py): the same value
as zlib's over the whole buffer, and a byte changed in any piece of a record still refused."""

from __future__ import annotations

import os
import threading
import zlib

import pytest
import torch

from trainmesh.checkpoint import crc as crc_module
from trainmesh.checkpoint.crc import PieceHasher, crc32_combine
from trainmesh.checkpoint.digest import DamagedCheckpoint
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.checkpoint.marker import MARKER


@pytest.mark.parametrize("split", [0, 1, 7, 4096, 1 << 20])
def test_combined_pieces_equal_zlibs_crc_of_the_whole(split):
    data = os.urandom((1 << 20) + 4099)
    first, second = data[:split], data[split:]
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(data)
    assert crc32_combine(zlib.crc32(data), 0, 0) == zlib.crc32(data)


def test_pieces_hashed_on_threads_equal_zlibs_crc_of_the_whole():
    data = memoryview(os.urandom(5 * (1 << 20) + 13))
    with PieceHasher(workers=2) as hasher:
        pieces: list = []
        for start in range(0, len(data), 1 << 20):
            hasher.add(pieces, data[start : start + (1 << 20)])
        assert hasher.finish(pieces) == zlib.crc32(data)
        assert hasher.finish([]) == zlib.crc32(b"")


def test_a_byte_changed_in_any_piece_of_a_record_is_refused(tmp_path, monkeypatch):
    """A 10 MB record is read in 4 MB pieces hashed on other threads: a byte flipped in the first,
    a middle or the last piece (its last byte) is found, and the intact file loads bit-exact."""
    weights = torch.randn(10 * (1 << 20) // 4, generator=torch.Generator().manual_seed(0))
    good = atomic_save({"state_dict": {"w": weights}, "epoch": 0}, tmp_path / "good.ckpt")
    threads: set[str] = set()
    original = zlib.crc32
    monkeypatch.setattr(
        crc_module.zlib, "crc32", lambda *a: threads.add(threading.current_thread().name) or original(*a)
    )
    assert torch.equal(load_checkpoint_file(good)["state_dict"]["w"], weights)
    if (os.cpu_count() or 1) > 1:
        assert any(name.startswith("trainmesh-crc") for name in threads), threads
    raw = good.read_bytes()
    start = raw.index(weights[:64].numpy().tobytes())  # the record's data: the tensor's bytes
    end = start + weights.numel() * 4
    assert MARKER.encode() in raw[:start]  # a file with a digest: the path checked here
    for at in (start, start + 5 * (1 << 20) + 3, end - 1):
        damaged = bytearray(raw)
        damaged[at] ^= 0x10
        path = tmp_path / f"bad{at}.ckpt"
        path.write_bytes(bytes(damaged))
        with pytest.raises(DamagedCheckpoint, match=r"its record .*data/\d+ no longer matches the digest"):
            load_checkpoint_file(path)
