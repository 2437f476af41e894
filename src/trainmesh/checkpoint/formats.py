"""Tell a readable trainmesh checkpoint from a torn, empty or foreign one, before anything is loaded.

A ``torch.save`` file is a zip archive whose index (the central directory) is written at its
very end: a file cut short anywhere has lost it, so opening the archive, which reads only that
index, finds truncation without reading the tensors; a cut that only takes the digest trainmesh
writes after the index (the zip comment) is found by the marker record at the file's start
(``marker.py``). Other frameworks' files are recognised by
their first bytes or their entries, so the message can say what to do with them instead.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

from trainmesh.checkpoint.marker import end_problem

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# torch.save before torch 1.6 wrote a pickle stream, not a zip, starting with this magic number.
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"


class UnreadableCheckpoint(ValueError):
    """A file or directory that is not a checkpoint trainmesh can read: torn, empty, or another
    framework's. Raised before anything is loaded into a model."""


def file_problem(path: Path) -> str | None:
    """Why the file at ``path`` cannot be read as a checkpoint, as one message; None when its
    structure is sound (a full read may still find damage inside)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        return f"{path} is not a readable trainmesh checkpoint: {exc.strerror or exc}"
    if size == 0:
        return f"{path} is not a readable trainmesh checkpoint: truncated? (it is empty: zero bytes)"
    foreign = _foreign_by_first_bytes(path, head, size)
    if foreign is not None or head.startswith(_LEGACY_TORCH_MAGIC):
        return foreign
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return (
            f"{path} is not a readable trainmesh checkpoint: truncated? ({size} bytes without a complete "
            "torch.save archive: a write that was cut short, or not a checkpoint at all)"
        )
    cut = _end_problem(path)
    if cut is not None:
        return f"{path} is not a readable trainmesh checkpoint: truncated? ({size} bytes: {cut})"
    if "config.json" in names and any(name.endswith(".weights.h5") for name in names):
        return (
            f"{path} is a Keras 3 model archive (.keras), not a trainmesh checkpoint: load it with "
            f"keras.saving.load_model({str(path)!r}), or build the model with trainmesh.keras and train it there"
        )
    if not any(name.endswith("data.pkl") for name in names):
        return (
            f"{path} is a zip archive but not a torch.save file (it holds {sorted(names)[:3]}...), so not "
            "a trainmesh checkpoint"
        )
    return None


def _end_problem(path: Path) -> str | None:
    try:
        with open(path, "rb", buffering=0) as raw:
            return end_problem(raw.fileno())
    except OSError as exc:
        return f"its end cannot be read ({exc.strerror or exc})"


def damaged_record(path: Path | BinaryIO) -> str | None:
    """The first record of a ``torch.save`` archive whose bytes no longer match the CRC-32 written
    with them (bytes overwritten in place, size unchanged: the index still opens, and
    ``torch.load`` checks no CRC, so the damage would load as wrong numbers); None when all match.

    One sequential read of the file (about 0.15 s for 256 MB here, a third of ``torch.load``'s time).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        return f"(the archive: {exc})"


def _foreign_by_first_bytes(path: Path, head: bytes, size: int) -> str | None:
    if head.startswith(_HDF5_MAGIC):
        return (
            f"{path} is an HDF5 file (Keras .h5 weights or model), not a trainmesh checkpoint: load it with "
            "Keras (model.load_weights(...)) or h5py and copy the arrays into the module's parameters, "
            "then fit without ckpt_path"
        )
    if len(head) >= 9 and head[8:9] == b"{" and 0 < struct.unpack("<Q", head[:8])[0] < size:
        return (
            f"{path} is a safetensors file (Hugging Face's weights format), not a trainmesh checkpoint: "
            f"module.load_state_dict(safetensors.torch.load_file({str(path)!r})), then fit without ckpt_path"
        )
    return None


def content_problem(checkpoint: Any, source: str) -> str | None:
    """Why a loaded object is not a trainmesh checkpoint, saying whose it is and how to use it; None if it is."""
    if isinstance(checkpoint, Mapping) and "trainmesh_version" in checkpoint and "state_dict" in checkpoint:
        return None  # trainmesh's (it writes Lightning's version key too, for Lightning to read it)
    if isinstance(checkpoint, Mapping) and "pytorch-lightning_version" in checkpoint:
        return (
            f"{source} is a PyTorch Lightning checkpoint (Lightning {checkpoint['pytorch-lightning_version']}), "
            "not a trainmesh one: it lacks what fit resumes a Lightning checkpoint from (its 'loops' progress "
            "and 'optimizer_states'). Load its weights into the "
            f"module, module.load_state_dict(torch.load({source!r}, weights_only=False)['state_dict']), then "
            "fit without ckpt_path"
        )
    if _is_flat_tensor_dict(checkpoint):
        first = next(iter(checkpoint), None)
        return (
            f"{source} holds a bare state dict ({len(checkpoint)} tensors, e.g. {first!r}), not a trainmesh "
            f"checkpoint: module.load_state_dict(torch.load({source!r})), then fit without ckpt_path (or "
            "validate/test the module as it is)"
        )
    keys = sorted(map(str, checkpoint))[:8] if isinstance(checkpoint, Mapping) else []
    weights = [str(key) for key, value in checkpoint.items() if _is_flat_tensor_dict(value)] if keys else []
    hint = (
        f"its {weights[0]!r} entry looks like model weights: module.load_state_dict(torch.load({source!r}, "
        f"weights_only=False)[{weights[0]!r}])"
        if weights
        else "load its weights into the module yourself"
    )
    return (
        f"{source} is not a trainmesh checkpoint (no trainmesh_version/state_dict; it holds "
        f"{keys or type(checkpoint).__name__}), written by other code: {hint}, then fit without ckpt_path"
    )


def _is_flat_tensor_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())
