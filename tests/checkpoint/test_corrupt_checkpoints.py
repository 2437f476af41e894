"""Checkpoints that cannot be used say why, and change nothing (issue 12, items 9-11).

Torn, empty, random, foreign (Lightning, a bare state dict, another framework's dict,
safetensors, Keras) files and distributed checkpoints with a missing or truncated shard each get
one message, raised before anything reaches the model; ``"last"`` skips a damaged newest
checkpoint for the newest complete one, saying so; a full disk is named with where it happened,
in the ddp agent's summary too, and leaves nothing partial behind.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.damage import flip_largest_tensor_bytes
from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer
from helpers.processes import run_program
from helpers.said import said
from trainmesh.checkpoint.distributed import STATE_FILE, load_distributed, save_distributed
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file, no_space_error
from trainmesh.checkpoint.paths import checkpoint_problem
from trainmesh.checkpoint.shard_digest import DIGEST_FILE

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

STEPS = 3  # the good checkpoint's global step


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A trainmesh checkpoint after STEPS steps, as a file and as a distributed directory (what
    fsdp writes: the optimizer's state keyed by parameter name)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    folder = tmp_path_factory.mktemp("good")
    trainer, model = quiet_trainer(max_steps=STEPS), DropoutNet()
    trainer.fit(model, loaders()[0])
    trainer.save_checkpoint(folder / "file.ckpt")
    checkpoint = load_checkpoint_file(folder / "file.ckpt")
    checkpoint["optimizer_states"] = [get_optimizer_state_dict(model, o) for o in trainer.optimizers]
    save_distributed(checkpoint, folder / "dir.ckpt", rank=0, sharded_keys=["state_dict", "optimizer_states"])
    return {"file": folder / "file.ckpt", "dir": folder / "dir.ckpt"}


def fit_from(path: Path | str, **trainer_options: Any) -> Any:
    trainer = quiet_trainer(max_steps=STEPS + 1, **trainer_options)
    trainer.fit(DropoutNet(), loaders()[0], ckpt_path=str(path))
    return trainer


def refused_and_untouched(path: Path, message: str) -> None:
    """fit(ckpt_path=path) fails with ``message``, and the model's weights are what they were."""
    model = DropoutNet()
    before = flat_weights(model).clone()
    with pytest.raises(ValueError, match=message):
        quiet_trainer(max_steps=STEPS + 1).fit(model, loaders()[0], ckpt_path=str(path))
    assert torch.equal(flat_weights(model), before), "a failed load changed the model"


# ---- torn, empty and foreign files ----------------------------------------------------------------
def truncated(path: Path, good: dict[str, Path]) -> None:
    data = good["file"].read_bytes()
    path.write_bytes(data[: len(data) // 2])


def lightning(path: Path, good: dict[str, Path]) -> None:
    weights = load_checkpoint_file(good["file"])["state_dict"]
    torch.save(
        {
            "epoch": 1,
            "global_step": 3,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": weights,
            "loops": {},
            "callbacks": {},
            "optimizer_states": [],
            "lr_schedulers": [],
        },
        path,
    )


def safetensors_file(path: Path, good: dict[str, Path]) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))


def keras_archive(path: Path, good: dict[str, Path]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", "{}")
        archive.writestr("config.json", "{}")
        archive.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")


def overwritten_in_place(path: Path, good: dict[str, Path], source: Path | None = None) -> None:
    """Bytes inside the largest tensor's record flipped, the size unchanged: the index still opens."""
    flip_largest_tensor_bytes(good["file"] if source is None else source, path)


def without_digest(path: Path, good: dict[str, Path]) -> Path:
    """The good checkpoint written by plain torch.save, as older trainmesh wrote it: no digest."""
    torch.save(torch.load(good["file"], weights_only=False), path)
    assert b"trainmesh-digest" not in path.read_bytes()[-200:]
    return path


DAMAGED: dict[str, tuple[Callable[[Path, dict[str, Path]], None], str]] = {
    "truncated": (truncated, r"is not a readable trainmesh checkpoint: truncated\?"),
    # trainmesh's own file: refused by the digest written with it (checkpoint/digest.py).
    "overwritten in place": (
        overwritten_in_place,
        r"bad\.ckpt is damaged: its record .*/data/\d+ no longer matches the digest written with it",
    ),
    # A file without a digest (older trainmesh, Lightning, torch.save): refused by the zip's CRC-32s.
    "overwritten in place, no digest": (
        lambda p, g: overwritten_in_place(p, g, source=without_digest(p.with_name("plain.ckpt"), g)),
        r"bad\.ckpt is damaged: its record .*/data/\d+ no longer matches the checksum written with it",
    ),
    "zero bytes": (lambda p, g: p.write_bytes(b""), r"not a readable trainmesh checkpoint: truncated\? \(it is empty"),
    "random bytes": (lambda p, g: p.write_bytes(os.urandom(4096)), r"not a readable trainmesh checkpoint: truncated\?"),
    "lightning": (
        lightning,
        r"is a PyTorch Lightning checkpoint \(Lightning 2\.4\.0\), not a trainmesh one: .*"
        r"module\.load_state_dict\(torch\.load\(.*\)\['state_dict'\]\)",
    ),
    "bare state dict": (
        lambda p, g: torch.save(DropoutNet().state_dict(), p),
        r"holds a bare state dict \(4 tensors, e\.g\. 'net\.0\.weight'\), not a trainmesh checkpoint: "
        r"module\.load_state_dict",
    ),
    "another framework's dict": (
        lambda p, g: torch.save({"model": DropoutNet().state_dict(), "step": 3}, p),
        r"is not a trainmesh checkpoint .*its 'model' entry looks like model weights",
    ),
    "safetensors": (safetensors_file, r"is a safetensors file \(Hugging Face's weights format\)"),
    "keras h5": (lambda p, g: p.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64)), r"is an HDF5 file \(Keras \.h5"),
    "keras archive": (keras_archive, r"is a Keras 3 model archive \(\.keras\)"),
}


@pytest.mark.parametrize("kind", DAMAGED)
def test_a_damaged_or_foreign_file_says_what_it_is_and_changes_nothing(kind, good, tmp_path):
    write, message = DAMAGED[kind]
    path = tmp_path / "bad.ckpt"
    write(path, good)
    refused_and_untouched(path, message)


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_distributed_checkpoint_with_a_damaged_shard_names_it_and_changes_nothing(damage, good, tmp_path):
    broken = tmp_path / "broken.ckpt"
    shutil.copytree(good["dir"], broken)
    shard = sorted(broken.glob("*.distcp"))[0]
    if damage == "missing":
        shard.unlink()
    else:
        os.truncate(shard, shard.stat().st_size - 16)  # the tensors before the cut would load
    state = {"truncated": r"is truncated \(\d+ bytes of at least \d+\)", "missing": "is missing"}[damage]
    refused_and_untouched(broken, rf"is not a readable distributed checkpoint: shard {shard.name} {state}")


def overwrite_shard_record(directory: Path, record: str) -> Path:
    """Flip 64 bytes of one item's ``record`` ("data.pkl": its pickle; "data": its largest tensor)
    inside a shard, the size unchanged, as a damaged disk block would; returns the shard."""
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(str(directory)).read_metadata()
    info = max(metadata.storage_data.values(), key=lambda each: each.length)  # the largest tensor's item
    shard = directory / info.relative_path
    data = bytearray(shard.read_bytes())
    item = data[info.offset : info.offset + info.length]
    with zipfile.ZipFile(io.BytesIO(item)) as archive:
        entries = [i for i in archive.infolist() if i.filename.endswith("data.pkl") or "/data/" in i.filename]
        entry = max(
            (i for i in entries if (record == "data.pkl") == i.filename.endswith("data.pkl")), key=lambda i: i.file_size
        )
    name_length, extra_length = struct.unpack("<HH", item[entry.header_offset + 26 : entry.header_offset + 30])
    start = info.offset + entry.header_offset + 30 + name_length + extra_length
    for offset in range(start, start + min(64, entry.file_size)):
        data[offset] ^= 0x5A
    shard.write_bytes(bytes(data))
    return shard


@pytest.mark.parametrize("digest", ["digest", "no digest"])
@pytest.mark.parametrize("record", ["data.pkl", "data"])
def test_a_shard_damaged_in_place_is_named_and_changes_nothing(record, digest, good, tmp_path):
    # The pickle damaged: torch's raw UnpicklingError before; the tensor bytes: loaded silently.
    # Refused by the digest trainmesh writes with the shards, or where there is none (a directory
    # older trainmesh wrote) by each item's zip CRC-32s.
    broken = tmp_path / "broken.ckpt"
    shutil.copytree(good["dir"], broken)
    if digest == "no digest":  # as older trainmesh wrote it: no digest file, a state file without the marker
        (broken / DIGEST_FILE).unlink()
        torch.save(torch.load(broken / STATE_FILE, weights_only=False), broken / STATE_FILE)
    size = sum(p.stat().st_size for p in broken.iterdir())
    shard = overwrite_shard_record(broken, record)
    assert sum(p.stat().st_size for p in broken.iterdir()) == size
    against = "the digest" if digest == "digest" else "the checksums"
    refused_and_untouched(
        broken,
        rf"broken\.ckpt is damaged: shard {shard} no longer matches {against} written with it "
        r"\(entry '.*', bytes \d+-\d+, record .*\).*resume from an earlier checkpoint",
    )


# ---- "last" falls back ------------------------------------------------------------------------------
def aged(path: Path, seconds: float) -> Path:
    stamp = time.time() - seconds
    for each in (*(path.iterdir() if path.is_dir() else ()), path):
        os.utime(each, (stamp, stamp))
    return path


@pytest.mark.parametrize(
    ("newest", "sibling"), [("torn file", True), ("directory with a truncated shard", True), ("torn file", False)]
)
def test_last_skips_a_damaged_newest_checkpoint_for_the_newest_complete_one(newest, sibling, good, tmp_path):
    """Newest first: run_b/last.ckpt (damaged), run_b/epoch=0-step=3.ckpt (a top-k one of the same
    run, if ``sibling``), run_a/last.ckpt (a distributed checkpoint)."""
    older = tmp_path / "run_a" / "last.ckpt"
    older.parent.mkdir()
    shutil.copytree(good["dir"], older)
    aged(older, 300)
    (tmp_path / "run_b").mkdir()
    beside = tmp_path / "run_b" / "epoch=0-step=3.ckpt"
    if sibling:
        shutil.copy(good["file"], beside)
        aged(beside, 100)
    damaged = tmp_path / "run_b" / "last.ckpt"
    if newest == "torn file":
        truncated(damaged, good)
    else:
        shutil.copytree(good["dir"], damaged)
        shard = next(damaged.glob("*.distcp"))
        os.truncate(shard, shard.stat().st_size // 2)
    expected = beside if sibling else older
    with pytest.warns(
        UserWarning,
        match=rf"ckpt_path='last': skipped .*{damaged}.*resuming from the newest "
        rf"complete one, {expected}",
    ):
        trainer = fit_from("last", default_root_dir=tmp_path, exact_resume=True)  # trainmesh's own "last"
    assert trainer.ckpt_path == str(expected) and trainer.global_step == STEPS + 1


def test_last_with_only_damaged_checkpoints_is_never_silent(good, tmp_path, caplog):
    truncated(tmp_path / "last.ckpt", good)
    _, val = loaders()
    with pytest.raises(
        ValueError,
        match=r"ckpt_path='last': no readable checkpoint \(.*last\.ckpt is not a "
        r"readable trainmesh checkpoint: truncated\?.*\), and validate needs",
    ):
        quiet_trainer(default_root_dir=tmp_path).validate(DropoutNet(), val, ckpt_path="last")
    with pytest.warns(UserWarning, match=r"ckpt_path='last': no complete checkpoint; skipped .*truncated\?"):
        trainer = fit_from("last", default_root_dir=tmp_path, exact_resume=True)  # trainmesh's own "last"
    assert trainer.global_step == STEPS + 1 and trainer.ckpt_path is None
    assert f"ckpt_path='last': no complete checkpoint found under {tmp_path}; starting from scratch" in said(caplog)


# ---- a full disk -------------------------------------------------------------------------------------
class FillsUp:
    """A file on a disk with ``room`` bytes left: writing more fails with ENOSPC, as write(2) does."""

    def __init__(self, handle: Any, room: int) -> None:
        self.handle, self.room = handle, room

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if size > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= size
        return self.handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __enter__(self) -> FillsUp:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.close()


def test_disk_full_while_saving_a_file_names_the_place_and_leaves_nothing_partial(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    atomic_save({"global_step": 1, "w": torch.zeros(10)}, target)
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: FillsUp(real_fdopen(fd, mode), room=2000))
    with pytest.raises(
        OSError,
        match=rf"no space left on device while saving the checkpoint {target} "
        rf"\(in {tmp_path}, \d+ MB free there now\)",
    ) as caught:
        atomic_save({"global_step": 2, "w": torch.zeros(10_000)}, target)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no partial .tmp left
    assert load_checkpoint_file(target)["global_step"] == 1


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Any:
    """A real file system of ``size`` mounted at ``folder`` (a tmpfs: writes past it fail as on a
    full disk, short writes included); skipped where this process may not mount one."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (a real full disk is what this test checks)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_disk_full_while_saving_a_distributed_checkpoint_names_the_place_and_keeps_the_last(tmp_path):
    from torch.distributed.checkpoint.api import CheckpointException

    with small_disk(tmp_path / "disk", "1m") as disk:
        target = disk / "last.ckpt"
        save_distributed(
            {"state_dict": {"w": torch.ones(4)}, "global_step": 1}, target, rank=0, sharded_keys=["state_dict"]
        )
        (disk / "filler").write_bytes(bytes(700_000))  # room for less than the next save: a short write
        with pytest.raises(OSError, match=rf"no space left on device while saving the checkpoint {target} ") as caught:
            save_distributed(
                {"state_dict": {"w": torch.zeros(100_000)}, "global_step": 2},
                target,
                rank=0,
                sharded_keys=["state_dict"],
            )
        assert caught.value.errno == errno.ENOSPC
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "last.ckpt"]  # the staging directory is gone
        loaded = load_distributed(target, {"state_dict": {"w": torch.zeros(4)}})
        assert loaded["global_step"] == 1 and torch.equal(loaded["state_dict"]["w"], torch.ones(4))
    # With several processes DCP hands every rank each rank's exception pickled, as here: torch's
    # short-write RuntimeError without the OSError it came from. Before, that was all a user saw.
    failure = caught.value.__cause__
    assert isinstance(failure, CheckpointException), failure
    assert any("unexpected pos" in str(exc) for exc, _ in failure.failures.values()), failure.failures
    as_another_rank_sees_it = pickle.loads(pickle.dumps(failure))
    assert as_another_rank_sees_it.failures[0][0].__context__ is None
    named = no_space_error(as_another_rank_sees_it, target)
    assert named is not None and named.errno == errno.ENOSPC
    assert f"no space left on device while saving the checkpoint {target} (in {target.parent}," in str(named)


def _run_disk_full(args: list[str]) -> subprocess.CompletedProcess:
    """``python disk_full_run.py ARGS``: the elastic agent a fork of the fork server (helpers/forked.py:
    torch and trainmesh imported there once; 1.5-1.8 CPU-s of imports each as a new interpreter),
    its 2 workers new interpreters, as ``python PROGRAM`` starts them."""
    from helpers.forked import can_fork, run_forked

    script = Path(__file__).parent / "disk_full_run.py"
    if not can_fork():
        return run_program([str(script), *args], timeout=240, cwd=script.parent)
    return run_forked(script, args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240, cwd=script.parent)


def test_disk_full_under_fsdp_on_a_real_small_disk_is_in_the_agents_summary(tmp_path):
    # 2 processes, a distributed checkpoint: the first fits on the 400 KiB disk, the second not.
    with small_disk(tmp_path / "disk", "400k") as disk:
        result = _run_disk_full([str(disk / "ckpt"), "fsdp"])
        assert result.returncode != 0
        summary = result.stderr[result.stderr.rindex("trainmesh: worker rank") :]
        assert (
            f"no space left on device while saving the checkpoint {disk / 'ckpt'}/epoch=0-step=2.ckpt "
            f"(in {disk / 'ckpt'}"
        ) in summary, result.stderr[-3000:]
        assert [p.name for p in (disk / "ckpt").iterdir()] == ["epoch=0-step=1.ckpt"], "the last one is kept"
        assert checkpoint_problem(str(disk / "ckpt" / "epoch=0-step=1.ckpt")) is None


def test_disk_full_under_ddp_is_in_the_agents_summary(tmp_path):
    result = _run_disk_full([str(tmp_path / "ckpt")])
    assert result.returncode != 0
    summary = result.stderr[result.stderr.rindex("trainmesh: worker rank") :]
    assert "failed (exit code 1); every worker was stopped" in summary, result.stderr[-3000:]
    assert (
        f"OSError: [Errno 28] no space left on device while saving the checkpoint {tmp_path / 'ckpt'}"
        f"/epoch=0-step=1.ckpt (in {tmp_path / 'ckpt'}"
    ) in summary, summary
    assert not [p.name for p in (tmp_path / "ckpt").iterdir()], "a partial checkpoint was left behind"
