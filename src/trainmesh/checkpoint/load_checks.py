"""Loading a single-file checkpoint that carries a digest: every byte checked in the one read
that loads it, and a damaged file refused, named, before anything reaches a model."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import IO, Any, cast

import torch

from trainmesh.checkpoint.crc import PieceHasher
from trainmesh.checkpoint.digest import (
    ArchiveDigest,
    DamagedCheckpoint,
    DigestingReader,
    check_records,
    check_structure,
    crc_of,
)
from trainmesh.checkpoint.formats import UnreadableCheckpoint


def damaged_message(source: Path, what: str, *, clause: str = " no longer matches the digest written with it") -> str:
    return (
        f"{source} is damaged: {what}{clause} (bytes changed on disk or in a copy after the save). Nothing "
        "was loaded; resume from an earlier checkpoint of the run (ckpt_path=its path), or copy the file "
        "again from where it was written"
    )


def torn_load(source: Path, exc: BaseException) -> UnreadableCheckpoint:
    # The archive's index was intact but a record inside it is not (a damaged disk block, a copy
    # that went wrong): the same answer as a torn file, with torch's words attached.
    return UnreadableCheckpoint(
        f"{source} is not a readable trainmesh checkpoint: truncated or damaged? "
        f"(torch.load: {type(exc).__name__}: {str(exc)[:200]})"
    )


def load_with_digest(source: Path, raw: io.FileIO, digest: ArchiveDigest, map_location: Any) -> Any:
    """``torch.load`` of the open file ``raw``, checked against ``digest``: the headers, the index
    and the pickle before anything is unpickled (so damaged opcodes never run), then each record
    as torch reads it. DamagedCheckpoint names what does not match."""
    fd = raw.fileno()
    records, bad = check_structure(fd, 0, digest, os.fstat(fd).st_size)
    if bad is None:
        pickles = [r for r in records if r.name.endswith("data.pkl")]
        bad = next((f"its record {r.name}" for r in pickles if crc_of(fd, r.start, r.length) != r.crc), None)
    if bad is not None:
        raise DamagedCheckpoint(damaged_message(source, bad))
    with PieceHasher() as hasher:
        reader = DigestingReader(raw, hasher)
        reader.seek(0)
        try:
            # weights_only=False: our checkpoints hold RNG states and hyperparameters, which are not
            # plain tensors. Only load checkpoints you trust, as with any pickle.
            checkpoint = torch.load(cast(IO[bytes], reader), map_location=map_location, weights_only=False)
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
            bad = check_records(fd, records, reader.crcs, digest.records)
            if bad is not None:
                raise DamagedCheckpoint(damaged_message(source, f"its {bad}")) from exc
            raise torn_load(source, exc) from exc
    bad = check_records(fd, records, reader.crcs, digest.records)
    if bad is not None:
        raise DamagedCheckpoint(damaged_message(source, f"its {bad}"))
    return checkpoint
