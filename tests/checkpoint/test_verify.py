"""``trainmesh checkpoint verify PATH`` (issue 27, item 5): a checkpoint checked without loading it.

Checkpoints written by trainmesh's own save paths (``Trainer.save_checkpoint``, ``save_distributed``)
verify ok; the same bytes overwritten in place (size unchanged) are named with exit status 1; a
truncated file, a directory without DCP's metadata and a missing path exit 2 with a message.
"""

from __future__ import annotations

import io
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from helpers.models import DropoutNet, loaders, quiet_trainer
from trainmesh.checkpoint.distributed import STATE_FILE, readable_metadata, save_distributed
from trainmesh.checkpoint.io import load_checkpoint_file
from trainmesh.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Trainer's checkpoint after 3 steps, as a file and as a distributed directory."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    folder = tmp_path_factory.mktemp("good")
    trainer, model = quiet_trainer(max_steps=3), DropoutNet()
    trainer.fit(model, loaders()[0])
    trainer.save_checkpoint(folder / "file.ckpt")
    checkpoint = load_checkpoint_file(folder / "file.ckpt")
    checkpoint["optimizer_states"] = [get_optimizer_state_dict(model, o) for o in trainer.optimizers]
    save_distributed(checkpoint, folder / "dir.ckpt", rank=0, sharded_keys=["state_dict", "optimizer_states"])
    return {"file": folder / "file.ckpt", "dir": folder / "dir.ckpt"}


def verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["checkpoint", "verify", str(path)])
    return status, capsys.readouterr().out


def flip_largest_record(data: bytearray, start: int, length: int) -> str:
    """XOR 64 bytes inside the largest data record of the ``torch.save`` archive at
    ``data[start:start+length]``, in place; returns the record's name."""
    with zipfile.ZipFile(io.BytesIO(bytes(data[start : start + length]))) as archive:
        record = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    # The record's bytes follow its local header (30 bytes, the name, the extra field).
    header = start + record.header_offset
    name_length, extra_length = struct.unpack("<HH", data[header + 26 : header + 30])
    first = header + 30 + name_length + extra_length
    for offset in range(first, first + min(64, record.file_size)):
        data[offset] ^= 0x5A
    return record.filename


def test_good_file_and_directory_verify_ok(good, capsys):
    status, out = verify(good["file"], capsys)
    assert status == 0, out
    assert out.splitlines()[0].startswith("file.ckpt: ok (") and out.splitlines()[-1].startswith("ok: ")
    status, out = verify(good["dir"], capsys)
    assert status == 0, out
    shards = sorted(p.name for p in good["dir"].glob("*.distcp"))
    assert shards, "the directory has no shard to check"
    # One line per file checked: the state file, each shard, then the verdict.
    assert [line.split(":")[0] for line in out.splitlines()] == [STATE_FILE, *shards, "ok"], out


def test_a_file_overwritten_in_place_is_named(good, tmp_path, capsys):
    data = bytearray(good["file"].read_bytes())
    record = flip_largest_record(data, 0, len(data))
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(bytes(data))
    assert damaged.stat().st_size == good["file"].stat().st_size
    status, out = verify(damaged, capsys)
    assert status == 1, out
    assert f"damaged.ckpt: DAMAGED: {damaged} record {record} no longer matches" in out
    assert "ok:" not in out


def test_a_shard_overwritten_in_place_is_named(good, tmp_path, capsys):
    target = tmp_path / "dir.ckpt"
    shutil.copytree(good["dir"], target)
    storage = readable_metadata(target).storage_data
    index, info = max(storage.items(), key=lambda item: item[1].length)
    shard = target / info.relative_path
    data = bytearray(shard.read_bytes())
    flip_largest_record(data, info.offset, info.length)
    shard.write_bytes(bytes(data))
    status, out = verify(target, capsys)
    assert status == 1, out
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert "DAMAGED" in lines[info.relative_path] and f"entry {index.fqn!r}" in lines[info.relative_path], out
    assert lines[STATE_FILE].startswith(f"{STATE_FILE}: ok"), out
    assert "ok" not in lines


def test_a_truncated_file_is_refused(good, tmp_path, capsys):
    data = good["file"].read_bytes()
    torn = tmp_path / "torn.ckpt"
    torn.write_bytes(data[: len(data) // 2])
    status, out = verify(torn, capsys)
    assert status == 2, out
    assert "truncated?" in out and str(torn) in out


def test_a_directory_without_metadata_is_refused(good, tmp_path, capsys):
    target = tmp_path / "partial.ckpt"
    shutil.copytree(good["dir"], target)
    (target / ".metadata").unlink()
    status, out = verify(target, capsys)
    assert status == 2, out
    assert "not a complete distributed checkpoint: .metadata missing" in out


def test_a_missing_path_is_refused(tmp_path, capsys):
    status, out = verify(tmp_path / "nothing.ckpt", capsys)
    assert status == 2 and "does not exist" in out
