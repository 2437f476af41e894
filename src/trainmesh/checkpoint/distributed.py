"""Distributed checkpoints: a directory that every rank writes its shards into, in parallel,
with PyTorch's distributed checkpoint (DCP); loading reshards to any number of processes.

This module stores the pieces it is handed and knows none of their names: the caller says
which entries of the checkpoint dict are sharded (``sharded_keys``), and the state file records
them, so that load and consolidate rebuild the same dict.

Layout of ``path/``:
  ``.metadata`` and ``__*_*.distcp``  DCP's files: the sharded entries' tensors
  ``trainer_state.pt``               every other entry, plus the record of the sharded ones

A save goes to a temporary directory beside ``path`` (``.NAME.xxxxxxxx.tmp``) and takes the
old one's place only when it is complete, in one atomic exchange where the file system has one,
so a directory visible under its name is always a complete checkpoint. Before anything is loaded,
every file DCP's metadata names is checked to be there and long enough, so a torn or missing
shard is named instead of leaving a model half-loaded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.checkpoint.digest import DamagedCheckpoint
from trainmesh.checkpoint.formats import UnreadableCheckpoint, file_problem
from trainmesh.checkpoint.io import (
    atomic_save,
    delete_entry,
    exchange_paths,
    hidden_sibling,
    load_checkpoint_file,
    no_space_error,
)
from trainmesh.checkpoint.keys import holds_state
from trainmesh.checkpoint.layout import METADATA_FILE as METADATA_FILE  # re-exported: the layout's names
from trainmesh.checkpoint.layout import STATE_FILE as STATE_FILE
from trainmesh.checkpoint.layout import is_distributed_checkpoint as is_distributed_checkpoint
from trainmesh.checkpoint.marker import file_starts_with_marker
from trainmesh.checkpoint.shard_digest import DIGEST_FILE, damaged_item, items_of, read_digests, write_digests

# The state file's entry that records the sharded entries. Its value:
#   {"version": 1, "entries": {KEY: {"stored_as": DCP_KEY, "list": BOOL}, ...}}
# KEY is the checkpoint dict's key, DCP_KEY the top-level key DCP stored it under (the same key
# since version 1), and "list" says the entry was a list, stored as a dict keyed "0", "1", ...
RECORD_KEY = "__trainmesh_sharded_entries__"
RECORD_VERSION = 1

# Legacy: directories written before the record existed hold no RECORD_KEY. That code stored the
# Trainer's model ("state_dict") under the DCP key "model" and its list of optimizer states
# ("optimizer_states") under "optimizers". A state file without a record is read as if it held
# this one, so those checkpoints keep loading. This is the only place those names may appear.
LEGACY_RECORD: dict[str, Any] = {
    "version": 0,
    "entries": {
        "state_dict": {"stored_as": "model", "list": False},
        "optimizer_states": {"stored_as": "optimizers", "list": True},
    },
}


def save_distributed(
    checkpoint: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    rank: int,
    sharded_keys: Sequence[str],
    process_group: Any = None,
) -> None:
    """Every rank calls this with its own shards of the ``sharded_keys`` entries; rank 0 writes the rest.

    A sharded entry that is a list (one state dict per optimizer, say) is stored item by item
    and comes back as a list. A key of ``sharded_keys`` that ``checkpoint`` lacks is skipped.
    ``process_group``: the group of every rank that the save's collectives run on (the default
    group when None); a save in a background thread passes one of its own.
    """
    import torch.distributed.checkpoint as dcp

    tensors, record = _split_sharded(checkpoint, sharded_keys)
    target = Path(path)
    staging = _shared_staging_dir(target, rank, process_group)
    try:
        dcp.save(tensors, checkpoint_id=str(staging), no_dist=not _distributed(), process_group=process_group)
        if rank == 0:
            rest = {k: v for k, v in checkpoint.items() if k not in record["entries"]}
            atomic_save({**rest, RECORD_KEY: record}, staging / STATE_FILE)
            # The digests go last, once every file they cover is complete (shard_digest.py).
            write_digests(staging, dcp.FileSystemReader(str(staging)).read_metadata())
            _replace_directory(staging, target)
    except BaseException as exc:
        # The previous checkpoint at `path` is untouched until the swap, which puts it back on an
        # error: drop the half-written one.
        shutil.rmtree(staging, ignore_errors=True)
        full = no_space_error(exc, target)
        if full is not None:
            raise full from exc
        raise
    _barrier(process_group)


def _split_sharded(checkpoint: dict[str, Any], sharded_keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The entries DCP writes (lists as dicts keyed "0", "1", ...) and the record that rebuilds them."""
    if isinstance(sharded_keys, str):
        raise ValueError(
            f"sharded_keys={sharded_keys!r} is one string; pass a sequence of keys, e.g. [{sharded_keys!r}]"
        )
    if RECORD_KEY in checkpoint:
        raise ValueError(
            f"the checkpoint has an entry {RECORD_KEY!r}, a key reserved for the distributed "
            "checkpoint's own record; rename that entry"
        )
    tensors: dict[str, Any] = {}
    entries: dict[str, dict[str, Any]] = {}
    for key in sharded_keys:
        if key not in checkpoint:
            continue
        # DCP joins nested keys with "." in its metadata; a dot in a key would make them ambiguous.
        if not isinstance(key, str) or not key or "." in key:
            raise ValueError(f"sharded key {key!r} cannot name a DCP entry: use a non-empty string without '.'")
        value = checkpoint[key]
        is_list = isinstance(value, (list, tuple))
        tensors[key] = {str(i): item for i, item in enumerate(value)} if is_list else value
        entries[key] = {"stored_as": key, "list": is_list}
    return tensors, {"version": RECORD_VERSION, "entries": entries}


def templates_for(
    module: nn.Module, optimizers: Sequence[Optimizer], *, model_key: str, optimizers_key: str
) -> dict[str, Any]:
    """Templates for :func:`load_distributed` shaped like ``module``'s and ``optimizers``' own state.

    They come from the live objects, so the shards land wherever this run keeps them: a
    checkpoint written by 2 processes loads on 1, 4, or under another strategy.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {
        model_key: get_model_state_dict(module),
        optimizers_key: [
            get_optimizer_state_dict(module, optimizer) if holds_state(optimizer) else {} for optimizer in optimizers
        ],
    }


def load_distributed(path: str | os.PathLike[str], templates: dict[str, Any], *, part: bool = False) -> dict[str, Any]:
    """Load ``path``: the state file's entries, plus each sharded entry loaded into its template.

    ``templates`` maps a sharded key to a state shaped like this run's (a state dict, or a list
    of them for a list entry); see :func:`templates_for`. A template key the checkpoint does not
    hold is left out of the result, and so is a sharded entry without a template. A list entry
    the checkpoint holds fewer items of comes back with only the items it holds. With ``part``
    a template may hold some of the checkpoint's names only (a pipeline stage's layers; the caller
    checks that the stages together hold them all).
    """
    import torch.distributed.checkpoint as dcp

    source = Path(path)
    metadata = readable_metadata(source).state_dict_metadata
    rest, record = _read_state_file(source)
    held = {key: entry for key, entry in record["entries"].items() if key in templates}
    tensors = {
        entry["stored_as"]: _fit_template(key, templates[key], entry, metadata, source, part=part)
        for key, entry in held.items()
    }
    # DCP loads into the templates in place (they share the model's storage): the reader checks
    # every item this rank reads against its digest before it reads any (shard_digest.py).
    from trainmesh.checkpoint.verifying_reader import VerifyingReader

    reader = VerifyingReader(source, read_digests(source))
    try:
        dcp.load(tensors, checkpoint_id=str(source), storage_reader=reader, no_dist=not _distributed())
    except BaseException as exc:
        damaged = _damage_in(exc)
        if damaged is not None:
            raise DamagedCheckpoint(str(damaged)) from exc
        if not isinstance(exc, Exception) and not hasattr(exc, "failures"):
            raise  # KeyboardInterrupt, SystemExit
        missing = _inner_errors(exc, lambda e: str(e).startswith("Missing key in checkpoint state_dict"))
        if missing:
            # Intact files that lack what this run's state has: another model or optimizer saved them.
            raise ValueError(
                f"{source} holds no entry for this run's {str(missing[0]).rpartition(': ')[2].rstrip('.')} (its "
                "files are intact: every shard's checksums match): it was saved from another model, optimizer or "
                "configure_optimizers. Resume with the ones that saved it, or load only its weights"
            ) from exc
        raise UnreadableCheckpoint(
            f"{source} could not be read although every shard's checksums match ({type(exc).__name__}: "
            f"{str(exc)[:300]}). Use an earlier checkpoint of the run, or copy the directory again"
        ) from exc
    loaded = {}
    for key, entry in held.items():
        value = tensors[entry["stored_as"]]
        # Only the items the checkpoint holds were asked for (see _fit_template), in their order.
        loaded[key] = [value[k] for k in sorted(value, key=int)] if entry["list"] else value
    return {**rest, **loaded}


def _fit_template(
    key: str, template: Any, entry: dict[str, Any], metadata: Mapping[str, Any], source: Path, *, part: bool = False
) -> Any:
    """What DCP should load for one entry: the template, checked against what the checkpoint holds."""
    stored = _stored_under(entry["stored_as"], metadata)
    if entry["list"] != isinstance(template, (list, tuple)):
        saved_as = "a list" if entry["list"] else "one value"
        raise ValueError(
            f"the checkpoint {source} holds {key!r} as {saved_as}, but its template is "
            f"{type(template).__name__}: pass a template of the same form"
        )
    if entry["list"]:
        held = {name.split(".", 1)[0] for name in stored}
        # Only the items the checkpoint holds: DCP refuses a template key it cannot find.
        return {str(i): item for i, item in enumerate(template) if str(i) in held}
    if _is_tensor_dict(template):
        shapes = {k: _Shape(m) for k, m in stored.items() if hasattr(m, "size")}
        check_state_dict_fits(
            template, {k: v for k, v in shapes.items() if k in template} if part else shapes, source=str(source)
        )
    return template


def check_complete(path: Path) -> None:
    missing = [name for name in (METADATA_FILE, STATE_FILE) if not (path / name).exists()]
    if missing:
        foreign = (
            " A DCP checkpoint written by other code (it has .metadata but no trainer state) loads with "
            "torch.distributed.checkpoint.load into your model's state dict."
            if missing == [STATE_FILE]
            else ""
        )
        raise UnreadableCheckpoint(
            f"{path} is not a complete distributed checkpoint: {', '.join(missing)} missing (a save that "
            "was interrupted, or a directory of something else). Use the previous checkpoint, or the "
            f"'last' one that was fully written.{foreign}"
        )


def readable_metadata(path: Path) -> Any:
    """DCP's metadata of the checkpoint at ``path``, after checking that every file it names is
    there in full and that the state file is sound; UnreadableCheckpoint names what is not."""
    import torch.distributed.checkpoint as dcp

    check_complete(path)
    # .metadata is checked against its digest before it is unpickled. A state file with the marker
    # comes from a trainmesh that writes the digest file too, before the directory takes its name.
    if read_digests(path) is None and file_starts_with_marker(path / STATE_FILE):
        raise UnreadableCheckpoint(
            f"{path} is not a complete distributed checkpoint: {DIGEST_FILE} missing, which the trainmesh that "
            "wrote it (its state file says) writes with every directory. A copy that did not finish: copy the "
            "directory again, or use an earlier checkpoint"
        )
    try:
        metadata = dcp.FileSystemReader(str(path)).read_metadata()
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle means the same: a torn file
        raise UnreadableCheckpoint(
            f"{path} is not a readable distributed checkpoint: its {METADATA_FILE} is "
            f"truncated or damaged ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc
    needed: dict[str, int] = {}  # shard file -> the end of the last byte range read from it
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, end in sorted(needed.items()):
        shard = path / name
        size = shard.stat().st_size if shard.is_file() else None
        if size is None or size < end:
            state = "is missing" if size is None else f"is truncated ({size} bytes of at least {end})"
            raise UnreadableCheckpoint(
                f"{path} is not a readable distributed checkpoint: shard {name} {state}. A copy that did not "
                "finish, or a damaged disk: copy the directory again, or use an earlier checkpoint"
            )
    problem = file_problem(path / STATE_FILE)
    if problem is not None:
        raise UnreadableCheckpoint(problem)
    return metadata


def damaged_shard(path: Path, metadata: Any) -> str | None:
    """The first stored item of ``metadata`` whose bytes no longer match the digest written with
    them (the zip CRC-32s in a directory without digests), as a message naming the shard file; None
    when all match. One read of every item (see shard_digest.py)."""
    return damaged_item(path, items_of(metadata), read_digests(path))


def _damage_in(error: BaseException | None) -> DamagedCheckpoint | None:
    """The DamagedCheckpoint a reader raised, through DCP's wrapping."""
    found = _inner_errors(error, lambda e: isinstance(e, DamagedCheckpoint))
    return found[0] if found and isinstance(found[0], DamagedCheckpoint) else None


def _inner_errors(
    error: BaseException | None, matches: Callable[[BaseException], bool], seen: set[int] | None = None
) -> list[BaseException]:
    """The errors ``matches`` picks among ``error`` and those it wraps (causes, and DCP's
    ``failures``: {rank: (exc, trace)}), the outermost first."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return []
    seen.add(id(error))
    if matches(error):
        return [error]
    wrapped = [pair[0] for pair in (getattr(error, "failures", None) or {}).values() if isinstance(pair, tuple)]
    return [
        found
        for inner in (error.__cause__, error.__context__, *wrapped)
        for found in _inner_errors(inner, matches, seen)
    ]


def consolidate(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> Path:
    """Turn a distributed checkpoint into one file that ``torch.load`` reads (full weights)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    src = Path(source)
    readable_metadata(src)
    scratch = hidden_sibling(Path(destination), "tmp")
    try:
        dcp_to_torch_save(src, scratch)
        tensors = torch.load(scratch, map_location="cpu", weights_only=False)
    finally:
        scratch.unlink(missing_ok=True)
    rest, record = _read_state_file(src)
    entries = {}
    for key, entry in record["entries"].items():
        # An empty entry left nothing in DCP's files: it comes back empty, as it was saved.
        value = tensors.get(entry["stored_as"], {})
        # Legacy directories keyed list items by int, version 1 by str: int() orders both.
        entries[key] = [value[k] for k in sorted(value, key=int)] if entry["list"] else value
    return atomic_save({**rest, **entries}, destination)


def inspect_distributed(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, dict[str, tuple[int, ...]]]]:
    """The state file's entries, and each sharded entry's tensor shapes by name, read without loading tensors.

    A list entry's names start with the item's index (``"0.state.weight.exp_avg"``). No tensor
    byte is read, so none is checked here: a load checks those it reads, ``verify`` all of them.
    """
    source = Path(path)
    metadata = readable_metadata(source).state_dict_metadata
    rest, record = _read_state_file(source)
    shapes = {
        key: {
            name: tuple(meta.size)
            for name, meta in _stored_under(entry["stored_as"], metadata).items()
            if hasattr(meta, "size")
        }
        for key, entry in record["entries"].items()
    }
    return rest, shapes


def _read_state_file(source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state file's own entries, and the record of the sharded ones (the legacy one if it has none)."""
    rest = load_checkpoint_file(source / STATE_FILE)  # checked against its digest as it is read
    record = rest.pop(RECORD_KEY, LEGACY_RECORD)
    if record.get("version", 0) > RECORD_VERSION:
        raise ValueError(
            f"{source} was written by a newer trainmesh (distributed checkpoint record version "
            f"{record['version']}, this one reads up to {RECORD_VERSION}); upgrade trainmesh to load it"
        )
    return rest, record


def _stored_under(stored_as: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """DCP's metadata of one top-level key, by the name below it (DCP flattens nested keys with ".")."""
    prefix = f"{stored_as}."
    return {key[len(prefix) :]: meta for key, meta in metadata.items() if key.startswith(prefix)}


def _is_tensor_dict(value: Any) -> bool:
    """A flat dict of tensors: a model's state dict, whose names and shapes can be checked up front."""
    return isinstance(value, Mapping) and all(isinstance(v, torch.Tensor) for v in value.values())


class _Shape:
    """Stands in for a tensor in a shape comparison (DCP metadata knows sizes, not values)."""

    def __init__(self, metadata: Any) -> None:
        self.shape = tuple(metadata.size)


def _shared_staging_dir(target: Path, rank: int, group: Any) -> Path:
    # All ranks must write into the same new directory: rank 0 names it, the others learn it.
    name = [hidden_sibling(target, "tmp").name if rank == 0 else None]
    if _distributed():
        dist.broadcast_object_list(name, src=0, group=group)
    staging = target.parent / str(name[0])
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def _replace_directory(staging: Path, target: Path) -> None:
    """Put the complete new checkpoint at ``target`` in one step: readers find the old one or the
    new one there, never neither and never a mix; the old one is deleted afterwards, out of sight."""
    if not os.path.lexists(target):
        os.replace(staging, target)
        return
    retired = hidden_sibling(target, "old")
    if exchange_paths(staging, target):
        os.replace(staging, retired)  # the staging name now holds the old checkpoint
    else:
        # No atomic exchange here (NFS, Lustre, not Linux): two renames, with a moment between
        # them when `target` is missing. A kill there leaves the complete new checkpoint in
        # staging beside the retired one; the next start puts it in place (see cleanup).
        os.replace(target, retired)
        try:
            os.replace(staging, target)
        except BaseException:
            os.replace(retired, target)  # an error (not a kill) between them: the old one goes back
            raise
    delete_entry(retired)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier(group: Any = None) -> None:
    if _distributed():
        dist.barrier(group=group)
