"""A checkpoint that lost its last bytes is refused, however many (issue 34, item 6).

A file's digest is its last bytes (the zip comment, ``checkpoint/digest.py``), so a cut there once
read as a file without a digest and loaded. A trainmesh file now starts with a marker record
(``checkpoint/marker.py``) saying that a digest follows: every cut, from one byte to past the
index, is refused by ``verify`` (exit 2) and by ``fit(ckpt_path=...)`` before training. Files
without the marker (``torch.save``, older trainmesh) still verify and load. A distributed
directory's shards, state file and digest file are checked the same way.
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer
from trainmesh.checkpoint import marker as marker_module
from trainmesh.checkpoint.digest import DamagedCheckpoint, read_trailer, write_trailer
from trainmesh.checkpoint.distributed import STATE_FILE, save_distributed
from trainmesh.checkpoint.formats import UnreadableCheckpoint
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.checkpoint.marker import MARKER
from trainmesh.checkpoint.shard_digest import DIGEST_FILE
from trainmesh.checkpoint.verify import NOT_A_CHECKPOINT, OK, verify_checkpoint
from trainmesh.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Trainer's checkpoint after 3 steps, as a file and as a distributed directory."""
    folder = tmp_path_factory.mktemp("good")
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(DropoutNet(), loaders()[0])
    trainer.save_checkpoint(folder / "file.ckpt")
    save_distributed(
        load_checkpoint_file(folder / "file.ckpt"), folder / "dir.ckpt", rank=0, sharded_keys=["state_dict"]
    )
    return {"file": folder / "file.ckpt", "dir": folder / "dir.ckpt"}


def index_length(data: bytes) -> int:
    """The bytes from the start of the zip's index (its central directory) to the end of the file."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return len(data) - archive.start_dir


def refused_as_cut_short(path: Path) -> str:
    verdict = verify_checkpoint(path)
    assert verdict.status == NOT_A_CHECKPOINT and "truncated?" in verdict.lines[0], verdict.lines
    with pytest.raises(UnreadableCheckpoint, match="truncated") as refused:
        load_checkpoint_file(path)
    assert not isinstance(refused.value, DamagedCheckpoint)  # cut short (exit 2), not damaged in place (1)
    return verdict.lines[0]


def test_a_trainmesh_file_cut_by_any_number_of_bytes_is_refused(good, tmp_path):
    data = good["file"].read_bytes()
    with open(good["file"], "rb") as handle:
        digest = read_trailer(handle.fileno())
    assert digest is not None and f"/{MARKER}".encode() in data[:100]  # the marker is the first record
    comment = len(data) - digest.size - 2  # the digest's own bytes, at the very end
    assert 60 < comment < index_length(data), (comment, index_length(data))
    # Every cut through the digest, its zip end record and torch's zip64 records (22, 20 and 56
    # bytes), every fifth through the rest of the index, then a few through the records themselves.
    ends = comment + 22 + 20 + 56
    cuts = [*range(1, ends + 16), *range(ends + 16, index_length(data) + 8, 5), len(data) // 3, len(data) // 2]
    cut = tmp_path / "cut.ckpt"
    said = set()
    for length in cuts:
        cut.write_bytes(data[:-length])
        said.add(refused_as_cut_short(cut).split("(", 1)[1][:40])
    assert len(cuts) > 300 and any("zip comment is" in line for line in said), said
    # As the issue found it: one byte off the end, then verify, then fit from it.
    cut.write_bytes(data[:-1])
    assert main(["checkpoint", "verify", str(cut)]) == NOT_A_CHECKPOINT
    model = DropoutNet()
    before = flat_weights(model).clone()
    with pytest.raises(UnreadableCheckpoint, match=r"cut\.ckpt is not a readable trainmesh checkpoint: truncated\?"):
        quiet_trainer(max_steps=4).fit(model, loaders()[0], ckpt_path=str(cut))
    assert torch.equal(flat_weights(model), before), "a refused load changed the model"


def test_files_without_the_marker_still_load_and_verify(good, tmp_path):
    state = torch.load(good["file"], weights_only=False)
    plain = tmp_path / "plain.ckpt"  # torch.save, Lightning, trainmesh before digests
    torch.save(state, plain)
    older = tmp_path / "older.ckpt"  # trainmesh with a digest and without the marker
    torch.save(state, older)
    with open(older, "r+b") as handle:
        assert write_trailer(handle.fileno()) is not None
    for path, checked in ((plain, "zip CRC-32s, no digest"), (older, "digest")):
        verdict = verify_checkpoint(path)
        assert verdict.status == OK and verdict.lines[0].endswith(f", {checked})"), verdict.lines
        assert load_checkpoint_file(path)["global_step"] == 3
    # An older file cut inside its digest: its zip end record says how long the comment was.
    data = older.read_bytes()
    for length in (1, 20, 50):
        older.write_bytes(data[:-length])
        assert "the file lost its last" in refused_as_cut_short(older)


def test_a_directory_with_a_file_cut_short_or_missing_is_refused(good, tmp_path):
    shard = sorted(good["dir"].glob("*.distcp"))[0].name
    size = (good["dir"] / shard).stat().st_size
    broken = tmp_path / "broken.ckpt"
    for name, lengths in ((shard, [*range(1, 40), size // 2]), (STATE_FILE, [1, 30, 60, 100])):
        for length in lengths:
            shutil.rmtree(broken, ignore_errors=True)
            shutil.copytree(good["dir"], broken)
            os.truncate(broken / name, (broken / name).stat().st_size - length)
            verdict = verify_checkpoint(broken)
            assert verdict.status == NOT_A_CHECKPOINT, (name, length, verdict.lines)
            assert "truncated" in verdict.lines[0], verdict.lines
    # The digest file, written last: a copy that missed it is not taken for an older directory.
    shutil.rmtree(broken)
    shutil.copytree(good["dir"], broken)
    (broken / DIGEST_FILE).unlink()
    verdict = verify_checkpoint(broken)
    assert verdict.status == NOT_A_CHECKPOINT and f"{DIGEST_FILE} missing" in verdict.lines[0], verdict.lines


def test_a_torch_whose_serialization_is_not_known_saves_without_the_marker_and_says_so(tmp_path, monkeypatch):
    # The marker goes in between torch.save's two private steps; a torch that changed them must
    # not stop every save: the file is written by torch.save, with its digest and without the marker.
    monkeypatch.setattr(marker_module, "_known_serialization", lambda: False)
    with pytest.warns(UserWarning, match="checkpoint saved without trainmesh's marker record"):
        path = atomic_save({"trainmesh_version": "x", "state_dict": {"w": torch.ones(3)}}, tmp_path / "a.ckpt")
    assert f"/{MARKER}".encode() not in path.read_bytes()[:200]
    with open(path, "rb") as handle:
        assert read_trailer(handle.fileno()) is not None
    assert verify_checkpoint(path).status == OK and load_checkpoint_file(path)["state_dict"]["w"].sum() == 3
