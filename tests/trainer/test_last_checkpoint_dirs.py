"""fit(ckpt_path="last") finds distributed checkpoints (directories) as well as files (issue 12, item 6)."""

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.processes import run_program
from trainmesh.checkpoint.distributed import METADATA_FILE, STATE_FILE
from trainmesh.trainer.checkpointing import resolve_ckpt_path

SCRIPT = Path(__file__).parent / "last_dirs_run.py"


def leg(root, out, strategy, steps, *extra):
    result = run_program([str(SCRIPT), str(root), str(out), strategy, str(steps), *extra], timeout=240,
                         cwd=SCRIPT.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("strategy", ["fsdp", "sharded"])
def test_fsdp_resumes_from_its_last_directory_checkpoint(tmp_path, strategy):
    first = leg(tmp_path, tmp_path / "first.pt", strategy, 6)
    last = [p for p in tmp_path.rglob("last*.ckpt")]
    assert len(last) == 1 and last[0].is_dir(), last  # fsdp's last checkpoint is a directory
    second = leg(tmp_path, tmp_path / "second.pt", strategy, 10, "last")
    # Resumed from the directory, not started over (step 0 means "last" found nothing).
    assert second["start"]["step"] == 6, "ckpt_path='last' did not resume from " + str(last[0])
    assert second["end"]["step"] == 10
    saved, loaded = first["end"]["state_dict"], second["start"]["state_dict"]
    assert saved.keys() == loaded.keys()
    for name in saved:
        assert torch.equal(saved[name], loaded[name]), name


# ---- the search itself, without processes ------------------------------------------------------

def fake_trainer(root):
    return SimpleNamespace(checkpoint_callback=None, default_root_dir=str(root), loggers=[], stage="fit",
                           is_global_zero=True)


def distributed_dir(path, *, complete=True, age=0.0):
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"x")
    if complete:
        (path / METADATA_FILE).write_bytes(b"x")
        (path / STATE_FILE).write_bytes(b"x")
    stamp = time.time() - age
    for each in (*path.iterdir(), path):
        os.utime(each, (stamp, stamp))
    return path


def checkpoint_file(path, *, age=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_last_finds_a_complete_directory(tmp_path):
    found = distributed_dir(tmp_path / "checkpoints" / "last.ckpt")
    assert resolve_ckpt_path(fake_trainer(tmp_path), "last") == str(found)


def test_last_takes_the_newest_of_files_and_directories(tmp_path):
    older = checkpoint_file(tmp_path / "a" / "last.ckpt", age=100)
    newer = distributed_dir(tmp_path / "b" / "last.ckpt", age=10)
    assert resolve_ckpt_path(fake_trainer(tmp_path), "last") == str(newer)
    os.utime(older, None)  # now the file is the newest
    assert resolve_ckpt_path(fake_trainer(tmp_path), "last") == str(older)


def test_last_skips_incomplete_directories_and_temporaries(tmp_path):
    good = distributed_dir(tmp_path / "last.ckpt", age=100)
    distributed_dir(tmp_path / "v" / "last-v1.ckpt", complete=False)  # interrupted: no .metadata
    distributed_dir(tmp_path / ".last.ckpt.0123abcd.tmp")  # trainmesh's staging directory
    distributed_dir(tmp_path / ".last.ckpt.0123abcd.old")  # a retired one being deleted
    checkpoint_file(tmp_path / ".last.ckpt.k2j3h4.tmp")  # atomic_save's temporary file
    assert resolve_ckpt_path(fake_trainer(tmp_path), "last") == str(good)


def test_last_with_only_an_incomplete_directory_starts_fresh(tmp_path, capsys):
    distributed_dir(tmp_path / "last.ckpt", complete=False)
    assert resolve_ckpt_path(fake_trainer(tmp_path), "last", allow_fresh_start=True) is None
    assert "starting from scratch" in capsys.readouterr().out
