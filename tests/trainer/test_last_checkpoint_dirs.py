"""fit(ckpt_path="last") finds distributed checkpoints (directories) as well as files (issue 12, item 6)."""

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.batches import Batches, LegFailed
from helpers.said import said
from trainmesh.checkpoint.distributed import METADATA_FILE, save_distributed
from trainmesh.trainer.checkpoint_paths import resolve_ckpt_path

SCRIPT = Path(__file__).parent / "last_dirs_run.py"
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # one-process DCP


STRATEGIES = ["fsdp", "fsdp-sharded"]  # one file (fsdp's default, as Lightning's), a directory


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Batches:
    """Both strategies' first legs in one launch, then (in other processes) both resumes in another:
    one after another in the same processes (helpers/batches.py). Strategy S trains under root/S."""
    root = tmp_path_factory.mktemp("last_dirs")

    def leg(strategy, name, steps, *extra):
        (root / strategy).mkdir(exist_ok=True)
        return (
            f"{strategy}/{name}",
            2,
            [str(root / strategy), str(root / strategy / f"{name}.pt"), strategy, str(steps), *extra],
            {},
        )

    plan = [
        *(leg(strategy, "first", 6) for strategy in STRATEGIES),
        None,
        *(leg(strategy, "second", 10, "last") for strategy in STRATEGIES),
    ]
    batches = Batches(SCRIPT, root, plan, leg_timeout=240, cwd=SCRIPT.parent, forked=True, fork_workers=True)
    try:
        batches(f"{STRATEGIES[0]}/first")  # the first launch
    except LegFailed:
        pass  # each test says so
    # The last checkpoints as the first legs left them, before the resumes write theirs.
    batches.last_after_first = {
        strategy: [(path, path.is_dir()) for path in (root / strategy).rglob("last*.ckpt")] for strategy in STRATEGIES
    }
    return batches


def leg(legs, strategy, name):
    legs(f"{strategy}/{name}")
    return torch.load(legs.root / strategy / f"{name}.pt", weights_only=False)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fsdp_resumes_from_its_last_checkpoint_a_file_or_a_directory(legs, strategy):
    first = leg(legs, strategy, "first")
    last = [path for path, _ in legs.last_after_first[strategy]]
    is_dir = [directory for _, directory in legs.last_after_first[strategy]]  # when the first leg ended
    # fsdp's last checkpoint: one file by default (Lightning's state_dict_type="full"), a directory when sharded
    assert len(last) == 1 and is_dir[0] == (strategy == "fsdp-sharded"), last
    second = leg(legs, strategy, "second")
    # Resumed from it, not started over (step 0 means "last" found nothing).
    assert second["start"]["step"] == 6, "ckpt_path='last' did not resume from " + str(last[0])
    assert second["end"]["step"] == 10
    saved, loaded = first["end"]["state_dict"], second["start"]["state_dict"]
    assert saved.keys() == loaded.keys()
    for name in saved:
        assert torch.equal(saved[name], loaded[name]), name


# ---- the search itself, without processes ------------------------------------------------------


def fake_trainer(root):
    return SimpleNamespace(
        checkpoint_callback=None, default_root_dir=str(root), loggers=[], stage="fit", is_global_zero=True
    )


def distributed_dir(path, *, complete=True, age=0.0):
    # A real (tiny) one: "last" reads the index of what it picks, and skips what is unreadable.
    path.parent.mkdir(parents=True, exist_ok=True)
    save_distributed({"state_dict": {"w": torch.zeros(2)}, "global_step": 1}, path, rank=0, sharded_keys=["state_dict"])
    if not complete:
        (path / METADATA_FILE).unlink()
    stamp = time.time() - age
    for each in (*path.iterdir(), path):
        os.utime(each, (stamp, stamp))
    return path


def checkpoint_file(path, *, age=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": 1}, path)
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
    with pytest.warns(UserWarning, match=r"skipped .*last-v1\.ckpt is not a complete distributed checkpoint"):
        assert resolve_ckpt_path(fake_trainer(tmp_path), "last") == str(good)


def test_last_with_only_an_incomplete_directory_starts_fresh(tmp_path, caplog):
    distributed_dir(tmp_path / "last.ckpt", complete=False)
    with pytest.warns(UserWarning, match=r"no complete checkpoint; skipped .*last\.ckpt is not a complete"):
        assert resolve_ckpt_path(fake_trainer(tmp_path), "last", allow_fresh_start=True) is None
    assert "starting from scratch" in said(caplog)


def test_named_last_resumes_the_checkpoint_a_directory_swap_cut_in_two_left(tmp_path):
    """A kill between the two renames of a directory swap (no atomic exchange: NFS, Lustre) leaves no
    last.ckpt, the complete new checkpoint in staging beside the retired one; fit(ckpt_path="last")
    puts it in place before it chooses, and resumes it (review-s58a: after fit's choice moved ahead of
    the start-up cleanup, the fit started from step 0 with Lightning's "no last checkpoint" warning)."""
    from helpers.models import TutorialModule, loaders, quiet_trainer
    from trainmesh.callbacks import ModelCheckpoint

    folder = tmp_path / "ck"
    first = quiet_trainer(
        max_steps=2, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)]
    )
    first.fit(TutorialModule(num_features=16), loaders()[0])
    saved = torch.load(folder / "last.ckpt", weights_only=False)
    save_distributed(saved, folder / ".last.ckpt.0123abcd.tmp", rank=0, sharded_keys=["state_dict"])
    os.replace(folder / "last.ckpt", folder / ".last.ckpt.4567abcd.old")
    for path in folder.iterdir():
        os.utime(path, (time.time() - 100, time.time() - 100))  # left by an earlier run
    second = quiet_trainer(
        max_steps=2, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)]
    )
    module = TutorialModule(num_features=16)
    second.fit(module, loaders()[0], ckpt_path="last")  # max_steps reached: nothing trained after the restore
    assert second.ckpt_path == str(folder / "last.ckpt")
    assert second.global_step == 2
    assert all(torch.equal(module.state_dict()[name], value) for name, value in saved["state_dict"].items())
