"""zero1, sharded (ZeRO-2), fsdp (ZeRO-3) and hsdp against ddp, with real processes on gloo."""

import pytest
import torch
from torch import nn

from legs import SCRIPT, run
from trainmesh.precision import Precision
from trainmesh.strategies.fsdp import FSDPStrategy, shard_units
from trainmesh.strategies.protocol import Placement


def train(tmp_path, strategy, devices=2, env=None):
    out = tmp_path / f"{strategy}-{devices}.pt"
    result = run(str(SCRIPT), "sharded", str(out), strategy, str(devices), env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return {**torch.load(out), "stderr": result.stderr}


def weight_sum(saved):
    return sum(float(t.double().sum()) for t in saved["state_dict"].values())


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("ddp"), "ddp")


@pytest.mark.parametrize("strategy", ["zero1", "sharded", "fsdp"])
def test_sharded_strategies_match_ddp_after_20_adam_steps(tmp_path, ddp_run, strategy):
    saved = train(tmp_path, strategy)
    assert saved["steps"] == 20
    assert abs(weight_sum(saved) - weight_sum(ddp_run)) <= 1e-4
    assert saved["metrics"]["val_loss"] == pytest.approx(ddp_run["metrics"]["val_loss"], abs=1e-4)
    held, reference = saved["memory"], ddp_run["memory"]
    # Per-rank local bytes at world size 2 (the ZeRO paper's 1/N of the sharded parts).
    assert held["optimizer_state"] <= 0.55 * reference["optimizer_state"]
    if strategy == "fsdp":
        assert held["parameters"] + held["optimizer_state"] <= 0.55 * (reference["parameters"] + reference["optimizer_state"])
    if strategy in ("sharded", "fsdp"):
        assert held["gradients"] <= 0.55 * reference["gradients"]


def test_hsdp_on_a_2x2_mesh_matches_ddp(tmp_path):
    reference, saved = train(tmp_path, "ddp", devices=4), train(tmp_path, "hsdp", devices=4)
    assert abs(weight_sum(saved) - weight_sum(reference)) <= 1e-4
    assert saved["memory"]["parameters"] <= 0.55 * reference["memory"]["parameters"]  # sharded in pairs


def test_fsdp_clips_by_the_global_norm_and_accumulates_without_sync(tmp_path):
    env = {"CLIP": "0.05", "ACCUMULATE": "2"}
    reference, saved = train(tmp_path, "ddp", env=env), train(tmp_path, "fsdp", env=env)
    assert saved["steps"] == 20
    assert abs(weight_sum(saved) - weight_sum(reference)) <= 1e-4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)


def test_wrap_class_that_matches_nothing_is_named():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.raises(ValueError, match=r"wrap=\[Block\]\) matches no submodule of Sequential"):
        shard_units(model, wrap=[Block], min_num_params=None)
    assert shard_units(nn.Sequential(Block(), Block()), wrap=[Block], min_num_params=None)


def _bound(world=2, **options):
    return FSDPStrategy(**options, placement=Placement("cpu", tuple(range(world)), 1, Precision("32", device_type="cpu")))


def test_fsdp_on_a_model_without_parameters_is_a_clear_error():
    with pytest.raises(ValueError, match="has no parameters: there is nothing for fsdp to shard"):
        _bound().setup_module(nn.ReLU())


def test_hsdp_mesh_that_does_not_divide_the_world_is_a_clear_error():
    with pytest.raises(ValueError, match="shard groups of 3 processes do not divide the 4 processes"):
        _bound(world=4, shard_size=3).dims(4)


def test_fsdp_with_wrap_classes_and_activation_checkpointing_matches_ddp(tmp_path, ddp_run):
    saved = train(tmp_path, "fsdp", env={"FSDP_OPTIONS": "offload+checkpointing"})
    assert abs(weight_sum(saved) - weight_sum(ddp_run)) <= 1e-4
    # CPU offload moves shards off an accelerator; on a CPU run it says it does nothing.
    assert "cpu_offload=True) has no effect on CPU" in saved["stderr"]


def test_fsdp_builds_configure_model_on_the_meta_device_and_trains(tmp_path):
    saved = train(tmp_path, "fsdp-meta")
    assert saved["built_on"] == "meta"
    assert saved["steps"] == 20
    weights = saved["state_dict"]
    assert all(torch.isfinite(t).all() and t.abs().sum() > 0 for t in weights.values())
    assert saved["metrics"]["train_loss_epoch"] < 1.45  # it learned (chance level is ln 4 = 1.386 at start)


@pytest.fixture(scope="module")
def fsdp_checkpoint(tmp_path_factory):
    """fsdp on 2 processes: a distributed checkpoint and the full weights it was taken from."""
    root = tmp_path_factory.mktemp("dcp")
    directory, weights = root / "fsdp.ckpt", root / "weights.pt"
    result = run(str(SCRIPT), "dcp_save", str(directory), str(weights), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory, torch.load(weights)["state_dict"]


@pytest.mark.parametrize(("strategy", "devices"), [("single", 1), ("ddp", 2), ("fsdp", 4)])
def test_a_distributed_checkpoint_reshards_onto_another_layout(tmp_path, fsdp_checkpoint, strategy, devices):
    directory, trained = fsdp_checkpoint
    assert (directory / ".metadata").exists() and len(list(directory.glob("*.distcp"))) == 2  # one per rank
    out = tmp_path / "resumed.pt"
    result = run(str(SCRIPT), "dcp_resume", str(directory), str(out), strategy, str(devices), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = torch.load(out)
    assert resumed["steps"] == 20
    for name, tensor in trained.items():
        assert torch.equal(resumed["state_dict"][name], tensor), name


def test_consolidate_and_inspect(tmp_path, fsdp_checkpoint, capsys):
    from trainmesh.cli.main import main

    directory, trained = fsdp_checkpoint
    target = tmp_path / "whole.ckpt"
    assert main(["checkpoint", "consolidate", str(directory), str(target)]) == 0
    whole = torch.load(target, weights_only=False)
    for name, tensor in trained.items():
        assert torch.equal(whole["state_dict"][name], tensor), name
    assert whole["global_step"] == 20 and len(whole["optimizer_states"]) == 1
    assert main(["checkpoint", "inspect", str(directory)]) == 0
    shown = capsys.readouterr().out
    assert "distributed checkpoint, 2 shard file(s)" in shown and "global step 20" in shown
    assert "blocks.0.0.weight: [64, 64]" in shown


def test_an_incomplete_distributed_checkpoint_is_refused(tmp_path, fsdp_checkpoint):
    import shutil

    from trainmesh.checkpoint.distributed import load_distributed

    broken = tmp_path / "broken.ckpt"
    shutil.copytree(fsdp_checkpoint[0], broken)
    (broken / ".metadata").unlink()
    with pytest.raises(ValueError, match=r"not a complete distributed checkpoint: \.metadata missing"):
        load_distributed(broken, {"state_dict": nn.Linear(2, 2).state_dict()})


def test_a_distributed_checkpoint_for_another_model_names_the_difference(fsdp_checkpoint):
    from trainmesh.checkpoint.distributed import load_distributed

    other = nn.Sequential()
    other.add_module("head", nn.Linear(32, 4))
    with pytest.raises(ValueError, match=r"head\.weight: checkpoint \(4, 64\) vs model \(4, 32\)"):
        load_distributed(fsdp_checkpoint[0], {"state_dict": other.state_dict()})


def test_a_crash_while_saving_keeps_the_previous_distributed_checkpoint(tmp_path, monkeypatch):
    import torch.distributed.checkpoint as dcp

    from trainmesh.checkpoint.distributed import load_distributed, save_distributed

    target = tmp_path / "last.ckpt"
    model = nn.Linear(3, 3)
    save_distributed({"state_dict": model.state_dict(), "epoch": 1}, target, rank=0, sharded_keys=["state_dict"])

    def torn(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(dcp, "save", torn)
    with pytest.raises(OSError, match="disk full"):
        save_distributed({"state_dict": nn.Linear(3, 3).state_dict(), "epoch": 2}, target, rank=0,
                         sharded_keys=["state_dict"])
    monkeypatch.undo()
    fresh = nn.Linear(3, 3)
    loaded = load_distributed(target, {"state_dict": fresh.state_dict()})
    assert loaded["epoch"] == 1 and torch.equal(loaded["state_dict"]["weight"], model.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no half-written directory left


def test_a_single_file_checkpoint_loads_into_a_sharded_run(tmp_path):
    file, weights = tmp_path / "ddp.ckpt", tmp_path / "weights.pt"
    result = run(str(SCRIPT), "dcp_save", str(file), str(weights), "ddp", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert file.is_file()
    out = tmp_path / "resumed.pt"
    result = run(str(SCRIPT), "dcp_resume", str(file), str(out), "fsdp", "2", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    trained, resumed = torch.load(weights)["state_dict"], torch.load(out)["state_dict"]
    for name, tensor in trained.items():
        assert torch.equal(resumed[name], tensor), name


def test_predict_under_fsdp_returns_every_prediction_in_order(tmp_path):
    outs = {}
    for strategy in ("single", "fsdp"):
        outs[strategy] = tmp_path / f"{strategy}.pt"
        result = run(str(SCRIPT), "predict", str(outs[strategy]), strategy, timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
    single, sharded = torch.load(outs["single"]), torch.load(outs["fsdp"])
    assert sharded.shape == (101, 4)  # 7 batches over 2 ranks: the short shard was padded, then dropped
    torch.testing.assert_close(sharded, single, rtol=0, atol=1e-6)
