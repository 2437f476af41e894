"""ckpt_path="last" and the automatic resume fall back past a checkpoint found damaged as it loads
(its tensor bytes no longer match its digest): the next newest complete one is loaded, with a
warning naming both, on every process alike; a checkpoint named by its path still stops (issue 27)."""

import os
import shutil
from pathlib import Path

import pytest
import torch

import trainmesh as tm
from helpers.batches import Batches
from helpers.damage import flip_largest_tensor_bytes
from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer
from helpers.restarts import as_restart_of
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.checkpoint import DamagedCheckpoint

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # one-process DCP
SCRIPT = Path(__file__).parent / "resume_fallback_run.py"


class FirstStep(tm.Callback):
    def __init__(self) -> None:
        self.step: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.step = trainer.global_step


def _fit(folder, epochs, ckpt_path=None):
    """Returns the trained model and the global step training started at."""
    first, model = FirstStep(), DropoutNet()
    trainer = quiet_trainer(
        max_epochs=epochs,
        default_root_dir=folder,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=folder / "ckpts", save_top_k=-1), first],
        exact_resume=True,  # the named reference resume continues exactly, as the automatic restart does
    )
    trainer.fit(model, loaders()[0], ckpt_path=ckpt_path)
    return model, first.step


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    _fit(folder, 2)
    assert sorted(os.listdir(folder / "ckpts")) == ["epoch=0-step=12.ckpt", "epoch=1-step=24.ckpt"]
    return folder


@pytest.fixture
def newest_damaged(two_epochs, tmp_path):
    shutil.copytree(two_epochs / "ckpts", tmp_path / "ckpts")
    flip_largest_tensor_bytes(tmp_path / "ckpts" / "epoch=1-step=24.ckpt")
    return tmp_path


@pytest.mark.parametrize("how", ["ckpt_path='last'", "restart"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(how, two_epochs, newest_damaged, monkeypatch):
    damaged, previous = (newest_damaged / "ckpts" / name for name in ("epoch=1-step=24.ckpt", "epoch=0-step=12.ckpt"))
    if how == "restart":
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
        as_restart_of(monkeypatch, previous)
    announce = "ckpt_path='last'" if how != "restart" else "trainmesh: restart 1 of the elastic agent"
    with pytest.warns(
        UserWarning,
        match=rf"{announce}: {damaged} is damaged \(its record .* no longer matches the digest written with it\), "
        rf"so it was not loaded; resuming from the next newest complete checkpoint, {previous}",
    ):
        model, first = _fit(newest_damaged, 3, ckpt_path="last" if how != "restart" else None)
    assert first == 12
    # Bit-identical to resuming from the previous checkpoint directly (an undamaged copy of it).
    expected, _ = _fit(newest_damaged / "direct", 3, ckpt_path=two_epochs / "ckpts" / "epoch=0-step=12.ckpt")
    assert torch.equal(flat_weights(model), flat_weights(expected))


def test_a_damaged_checkpoint_named_by_its_path_still_stops(newest_damaged):
    with pytest.raises(DamagedCheckpoint, match=r"epoch=1-step=24\.ckpt is damaged: its record"):
        _fit(newest_damaged, 3, ckpt_path=newest_damaged / "ckpts" / "epoch=1-step=24.ckpt")


def test_validate_last_falls_back_and_with_every_checkpoint_damaged_fit_stops(newest_damaged):
    _, val = loaders()
    trainer = quiet_trainer(default_root_dir=newest_damaged)
    with pytest.warns(UserWarning, match=r"epoch=1-step=24\.ckpt is damaged .* checkpoint, .*epoch=0-step=12\.ckpt"):
        trainer.validate(DropoutNet(), val, ckpt_path="last")
    assert trainer.ckpt_path == str(newest_damaged / "ckpts" / "epoch=0-step=12.ckpt")
    flip_largest_tensor_bytes(newest_damaged / "ckpts" / "epoch=0-step=12.ckpt")
    # Not a fresh start: that would train a week again without a word about it.
    with (
        pytest.warns(UserWarning, match="is damaged"),
        pytest.raises(
            DamagedCheckpoint,
            match=r"found no other complete checkpoint of the run to fall back to \(damaged: .*step=24.*step=12",
        ),
    ):
        _fit(newest_damaged, 3, ckpt_path="last")


# ---- two processes, fsdp (distributed checkpoints), damaged on one rank's shard only ---------------
@pytest.fixture(scope="module")
def fsdp_legs(tmp_path_factory) -> Batches:
    root = tmp_path_factory.mktemp("fallback")
    first = root / "first" / "ckpts"
    plan = [
        ("first", 2, [str(root / "first"), str(root / "first.pt"), "6", "none"], {}),
        None,
        ("fallback", 2, [str(root / "fallback"), str(root / "fallback.pt"), "10", "last"], {}),
        ("direct", 2, [str(root / "direct"), str(root / "direct.pt"), "10", str(first / "epoch=0-step=4.ckpt")], {}),
    ]
    batches = Batches(SCRIPT, root, plan, leg_timeout=240, cwd=SCRIPT.parent, forked=True, fork_workers=True)
    batches("first")
    shutil.copytree(first, root / "fallback" / "ckpts")
    overwrite_shard(root / "fallback" / "ckpts" / "epoch=0-step=6.ckpt", "__1_0.distcp")
    return batches


def overwrite_shard(directory: Path, shard: str) -> None:
    """Flip 16 bytes in the middle of the largest item stored in ``shard`` (one rank's file)."""
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(str(directory)).read_metadata()
    info = max((i for i in metadata.storage_data.values() if i.relative_path == shard), key=lambda i: i.length)
    data = bytearray((directory / shard).read_bytes())
    middle = info.offset + info.length // 2
    for offset in range(middle, middle + 16):
        data[offset] ^= 0x5A
    (directory / shard).write_bytes(bytes(data))


def test_fsdp_ranks_fall_back_together_from_a_shard_damaged_on_one_rank(fsdp_legs):
    stderr = fsdp_legs("fallback")
    fallback = torch.load(fsdp_legs.root / "fallback.pt", weights_only=False)
    fsdp_legs("direct")
    direct = torch.load(fsdp_legs.root / "direct.pt", weights_only=False)
    ckpts = fsdp_legs.root / "fallback" / "ckpts"
    assert (
        f"ckpt_path='last': {ckpts / 'epoch=0-step=6.ckpt'} is damaged (shard "
        f"{ckpts / 'epoch=0-step=6.ckpt' / '__1_0.distcp'} no longer matches the digest written with it (entry"
        in stderr
    )
    assert f"resuming from the next newest complete checkpoint, {ckpts / 'epoch=0-step=4.ckpt'}" in stderr
    assert fallback["start"]["step"] == 4 and fallback["end"]["step"] == 10
    # Every rank resumed from the same, undamaged checkpoint: the result is a direct resume's, bit for bit.
    for when in ("start", "end"):
        for name, value in direct[when]["state_dict"].items():
            assert torch.equal(fallback[when]["state_dict"][name], value), (when, name)
