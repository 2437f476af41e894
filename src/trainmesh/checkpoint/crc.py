"""CRC-32 (zip's) of large buffers, in pieces hashed on other threads and joined.

zlib's CRC-32 runs at 3-6 GB/s on one core and releases the GIL, so the pieces of a record
``torch.load`` is reading can be hashed by other threads while it copies the next ones: the
check's time moves off the load's path instead of adding to it. Pieces are joined with
:func:`crc32_combine` (zlib's ``crc32_combine``, which Python's zlib does not expose), so the
result is exactly ``zlib.crc32`` of the whole buffer: the digest's format does not change.
"""

from __future__ import annotations

import functools
import os
import zlib
from concurrent.futures import Future, ThreadPoolExecutor, wait

_POLY = 0xEDB88320  # zip's CRC-32 polynomial, bit-reflected
_PARALLEL_MIN = 1 << 20  # a smaller piece is hashed in place: a thread's hand-off costs more


def _multiply(a: int, b: int) -> int:
    """a * b modulo the polynomial (bit-reflected, as zlib's multmodp)."""
    m, product = 1 << 31, 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> list[int]:
    """x^(2^n) modulo the polynomial, n = 0..31 (zlib's x2n_table)."""
    table, power = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(power)
        power = _multiply(power, power)
    return table


_X2N = _powers()


@functools.lru_cache(maxsize=64)  # pieces are mostly of one length: the shift is computed once
def _shift(length: int) -> int:
    """x^(8 * length) modulo the polynomial: what a CRC moves by over ``length`` zero bytes."""
    power, k = 1 << 31, 3  # x^0; bytes are 2^3 bits
    while length:
        if length & 1:
            power = _multiply(_X2N[k & 31], power)
        length >>= 1
        k += 1
    return power


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)``."""
    return _multiply(_shift(second_length), first) ^ second


class PieceHasher:
    """CRC-32s of consecutive pieces of one buffer, hashed on up to ``workers`` threads (in place
    with 0). Use as a context manager: leaving it waits for every piece handed to it."""

    def __init__(self, workers: int | None = None) -> None:
        count = min(2, os.cpu_count() or 1) if workers is None else workers
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="trainmesh-crc") if count > 1 else None

    def __enter__(self) -> PieceHasher:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def add(self, pieces: list[tuple[Future[int] | int, int]], piece: memoryview) -> None:
        """Hash ``piece``, the next of one buffer's ``pieces`` (a list, empty at first); its bytes
        must stay as they are, and alive, until :meth:`finish` returns."""
        if self._pool is not None and len(piece) >= _PARALLEL_MIN:
            pieces.append((self._pool.submit(zlib.crc32, piece), len(piece)))
        else:
            pieces.append((zlib.crc32(piece), len(piece)))

    def finish(self, pieces: list[tuple[Future[int] | int, int]]) -> int:
        """The CRC-32 of all of ``pieces`` in order, once every one is hashed."""
        wait([value for value, _ in pieces if isinstance(value, Future)])
        crc = 0
        for value, length in pieces:
            crc = crc32_combine(crc, value.result() if isinstance(value, Future) else value, length)
        return crc
