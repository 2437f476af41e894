"""Digests written with every checkpoint (issue 27, item 5): written last, checked in the read that loads.

A single file carries its digest in the zip comment (``checkpoint/digest.py``), a distributed
directory in ``trainmesh_digest.json`` (``checkpoint/shard_digest.py``). The damaged-file and
damaged-shard refusals are in test_corrupt_checkpoints.py (with and without a digest), the CLI's in
test_verify.py; here: the digest is the last thing a save writes, a load reads each record once,
and what older trainmesh wrote (no digest) still loads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers.forked import can_fork, run_forked
from trainmesh.checkpoint import digest as digest_module
from trainmesh.checkpoint import distributed as distributed_module
from trainmesh.checkpoint import io as io_module
from trainmesh.checkpoint.digest import DamagedCheckpoint, read_trailer
from trainmesh.checkpoint.distributed import STATE_FILE, load_distributed, save_distributed
from trainmesh.checkpoint.formats import UnreadableCheckpoint
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.checkpoint.paths import checkpoint_problem
from trainmesh.checkpoint.shard_digest import DIGEST_FILE
from trainmesh.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def checkpoint(seed: int = 0) -> dict[str, object]:
    generator = torch.Generator().manual_seed(seed)
    weights = {"big": torch.randn(1536, 1024, generator=generator), "small": torch.randn(7, generator=generator)}
    return {"state_dict": weights, "epoch": seed, "global_step": 3, "trainmesh_version": "test"}


def trailer_of(path: Path) -> object:
    with open(path, "rb") as handle:
        return read_trailer(handle.fileno())


def test_a_load_hashes_each_record_as_it_reads_it_not_in_a_second_read(tmp_path, monkeypatch):
    path = atomic_save(checkpoint(), tmp_path / "a.ckpt")
    assert trailer_of(path) is not None
    hashed_apart: list[int] = []  # bytes hashed outside torch.load's own reads: headers, index, pickle
    original = digest_module._crc_range
    monkeypatch.setattr(
        digest_module,
        "_crc_range",
        lambda fd, start, length, crc: hashed_apart.append(length) or original(fd, start, length, crc),
    )
    loaded = load_checkpoint_file(path)
    assert torch.equal(loaded["state_dict"]["big"], checkpoint()["state_dict"]["big"])
    assert 0 < sum(hashed_apart) < 0.01 * path.stat().st_size, hashed_apart


def test_a_save_that_fails_before_its_digest_leaves_the_old_file_and_no_other(tmp_path, monkeypatch):
    path = atomic_save(checkpoint(1), tmp_path / "a.ckpt")
    before = path.read_bytes()

    def fail(fd: int) -> None:
        raise OSError("the disk went away just before the digest")

    monkeypatch.setattr(io_module, "write_trailer", fail)
    with pytest.raises(OSError, match="just before the digest"):
        atomic_save(checkpoint(2), path)
    assert path.read_bytes() == before and load_checkpoint_file(path)["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]


def test_a_save_killed_before_its_digest_leaves_no_digest_and_nothing_under_its_name(tmp_path, tmp_path_factory):
    # A real kill (SIGKILL) where the digest would be written: torch.save's archive is complete in
    # the temporary file, but it carries no digest and never took the checkpoint's name.
    program = textwrap.dedent(
        f"""
        import os, signal, torch
        from trainmesh.checkpoint import io
        io.write_trailer = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        io.atomic_save({{"state_dict": {{"w": torch.ones(1000)}}, "trainmesh_version": "x"}}, {str(tmp_path / "a.ckpt")!r})
        """
    )
    # A fork of the fork server (helpers/forked.py: torch and trainmesh imported once), where it can be.
    script = tmp_path_factory.mktemp("killed_save") / "killed_save.py"
    script.write_text(program)
    if can_fork():
        run = run_forked(script, [], env={**os.environ}, timeout=120)
    else:
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == -9, run.stderr
    assert not (tmp_path / "a.ckpt").exists()
    (left,) = tmp_path.iterdir()  # the killed save's temporary, removed at the next start (cleanup.py)
    assert left.name.startswith(".a.ckpt.") and left.name.endswith(".tmp")
    assert trailer_of(left) is None
    assert torch.load(left, weights_only=False)["state_dict"]["w"].sum() == 1000  # the archive itself is whole


def test_a_file_without_a_digest_loads_and_verifies_by_its_zip_checksums(tmp_path, capsys):
    path = tmp_path / "older.ckpt"
    torch.save(checkpoint(4), path)  # as older trainmesh (and Lightning) wrote it: no digest
    assert trailer_of(path) is None
    assert torch.equal(load_checkpoint_file(path)["state_dict"]["big"], checkpoint(4)["state_dict"]["big"])
    assert main(["checkpoint", "verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "older.ckpt: ok (" in out and "zip CRC-32s, no digest" in out, out


def test_a_changed_or_unreadable_digest_is_refused(tmp_path):
    path = atomic_save(checkpoint(5), tmp_path / "a.ckpt")
    data = path.read_bytes()
    assert data.endswith(b" count=9")  # the digest's last field: 9 records (torch's 8, the marker)
    (tmp_path / "count.ckpt").write_bytes(data[:-1] + b"8")
    with pytest.raises(DamagedCheckpoint, match=r"count\.ckpt is damaged: its headers, index or the digest itself"):
        load_checkpoint_file(tmp_path / "count.ckpt")
    (tmp_path / "field.ckpt").write_bytes(data.replace(b" count=9", b" coun0=9"))
    with pytest.raises(
        DamagedCheckpoint, match=r"field\.ckpt is damaged: its digest \(the zip comment\) is unreadable"
    ):
        load_checkpoint_file(tmp_path / "field.ckpt")


def test_a_directory_carries_digests_written_after_its_files(tmp_path, monkeypatch):
    target = tmp_path / "dir.ckpt"
    save_distributed(checkpoint(6), target, rank=0, sharded_keys=["state_dict"])
    table = json.loads((target / DIGEST_FILE).read_text())
    assert set(table["shards"]) == {p.name for p in target.glob("*.distcp")} and table[".metadata"]["size"] > 0
    # The digests are the last thing written: a save failing there leaves the old directory.
    monkeypatch.setattr(distributed_module, "write_digests", lambda *args: (_ for _ in ()).throw(OSError("cut")))
    with pytest.raises(OSError, match="cut"):
        save_distributed(checkpoint(7), target, rank=0, sharded_keys=["state_dict"])
    templates = {"state_dict": {k: torch.zeros_like(v) for k, v in checkpoint()["state_dict"].items()}}
    assert load_distributed(target, templates)["epoch"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.ckpt"]


def test_a_directory_with_damaged_metadata_or_without_digests(tmp_path):
    target = tmp_path / "dir.ckpt"
    save_distributed(checkpoint(8), target, rank=0, sharded_keys=["state_dict"])
    templates = {"state_dict": {k: torch.zeros_like(v) for k, v in checkpoint()["state_dict"].items()}}
    older = tmp_path / "older.ckpt"
    shutil.copytree(target, older)
    (older / DIGEST_FILE).unlink()  # as older trainmesh wrote it: no digest file, a state file without the marker
    with pytest.raises(
        UnreadableCheckpoint, match=f"older.ckpt is not a complete distributed checkpoint: {DIGEST_FILE} missing"
    ):
        load_distributed(older, templates)  # a marked state file: its trainmesh wrote the digest file too
    torch.save(torch.load(older / STATE_FILE, weights_only=False), older / STATE_FILE)
    loaded = load_distributed(older, templates)
    assert torch.equal(loaded["state_dict"]["big"], checkpoint(8)["state_dict"]["big"])
    state = tmp_path / "state.ckpt"  # the state file (loop, RNG, hyperparameters) carries its own
    shutil.copytree(target, state)
    data = bytearray((state / STATE_FILE).read_bytes())
    data[len(data) // 3] ^= 0x01
    (state / STATE_FILE).write_bytes(bytes(data))
    with pytest.raises(DamagedCheckpoint, match=rf"state\.ckpt/{STATE_FILE} is damaged: .* the digest written"):
        load_distributed(state, templates)
    meta = bytearray((target / ".metadata").read_bytes())
    meta[len(meta) // 2] ^= 0x01
    (target / ".metadata").write_bytes(bytes(meta))
    with pytest.raises(DamagedCheckpoint, match=r"dir\.ckpt is damaged: its \.metadata no longer matches the digest"):
        load_distributed(target, templates)
    assert os.path.getsize(target / ".metadata") == len(meta)


def test_last_skips_a_file_whose_headers_no_longer_match_its_digest(tmp_path):
    # A byte of a record's local header (its timestamp): the zip opens, torch.load reads it and the
    # zip's CRC-32s all match; only the digest sees it, and "last" checks that much of every candidate.
    path = atomic_save(checkpoint(9), tmp_path / "a.ckpt")
    data = bytearray(path.read_bytes())
    assert data[:4] == b"PK\x03\x04"
    data[10] ^= 0xFF  # the first record's modification time
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=False)["epoch"] == 9  # nothing else notices
    problem = checkpoint_problem(str(path))
    assert problem is not None and "a.ckpt is damaged: its headers, index or the digest itself" in problem
    with pytest.raises(DamagedCheckpoint, match="no longer matches the digest"):
        load_checkpoint_file(path)


def test_an_archive_layout_the_digest_does_not_know_saves_without_one_and_says_so(tmp_path, monkeypatch):
    # A future torch writing another zip layout must not stop every save: the file goes without a
    # digest (checked by its zip CRC-32s on load), with a warning.
    def unknown(*args: object, **kwargs: object) -> None:
        raise ValueError("a layout from the future")

    monkeypatch.setattr(digest_module, "compute_digest", unknown)
    with pytest.warns(UserWarning, match="checkpoint saved without a digest .*a layout from the future"):
        path = atomic_save(checkpoint(10), tmp_path / "a.ckpt")
    assert trailer_of(path) is None and load_checkpoint_file(path)["epoch"] == 10
