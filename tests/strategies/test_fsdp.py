"""zero1, sharded (ZeRO-2), fsdp (ZeRO-3) and hsdp against ddp, with real processes on gloo.

The legs (programs of ddp_run.py) are listed once in ``plan``: legs of one world size run in one
launch, one after another in the same processes (helpers/batches.py), and each runs once per
module, so the ddp references and the checkpoint legs serve several tests.
"""

from pathlib import Path

import pytest
import torch
from legs import HERE, SCRIPT, run
from torch import nn

from helpers.batches import Batches
from trainmesh.precision import Precision
from trainmesh.strategies.fsdp import FSDPStrategy, shard_units
from trainmesh.strategies.protocol import Placement

CLIPPED = {"CLIP": "0.05", "ACCUMULATE": "2"}


def plan(root: Path) -> list[tuple[str, int, list[str], dict[str, str]]]:
    """(name, world size, ddp_run.py arguments, environment) of every leg, in the order they run:
    a checkpoint is written before the legs that resume it. A leg NAME writes root/NAME.pt."""

    def leg(name, world, *args, env=None):
        return name, world, [args[0], *(str(root / f"{name}.pt") if a == "OUT" else a for a in args[1:])], env or {}

    checkpoint, file = str(root / "fsdp.ckpt"), str(root / "ddp.ckpt")
    return [
        # world 2
        leg("ddp", 2, "sharded", "OUT", "ddp", "2"),
        *(leg(name, 2, "sharded", "OUT", name, "2") for name in ("zero1", "sharded", "fsdp")),
        leg("ddp-clipped", 2, "sharded", "OUT", "ddp", "2", env=CLIPPED),
        leg("fsdp-clipped", 2, "sharded", "OUT", "fsdp", "2", env=CLIPPED),
        leg("fsdp-offload", 2, "sharded", "OUT", "fsdp", "2", env={"FSDP_OPTIONS": "offload+checkpointing"}),
        leg("fsdp-meta", 2, "sharded", "OUT", "fsdp-meta", "2"),
        leg("dcp_save", 2, "dcp_save", checkpoint, "OUT"),
        leg("dcp_save-async", 2, "dcp_save_async", str(root / "async"), "OUT"),
        leg("resume-ddp-2", 2, "dcp_resume", checkpoint, "OUT", "ddp", "2"),
        leg("dcp_save-ddp", 2, "dcp_save", file, "OUT", "ddp"),
        leg("file-resume-fsdp-2", 2, "dcp_resume", file, "OUT", "fsdp", "2"),
        leg("predict-fsdp", 2, "predict", "OUT", "fsdp"),
        # world 4
        leg("ddp-4", 4, "sharded", "OUT", "ddp", "4"),
        leg("hsdp-4", 4, "sharded", "OUT", "hsdp", "4"),
        leg("resume-fsdp-4", 4, "dcp_resume", checkpoint, "OUT", "fsdp", "4"),
        # world 1
        leg("resume-single-1", 1, "dcp_resume", checkpoint, "OUT", "single", "1"),
        leg("predict-single", 1, "predict", "OUT", "single"),
    ]


class Legs(Batches):
    def out(self, name: str) -> Path:
        """The leg's output file, once it ran."""
        self(name)
        return self.root / f"{name}.pt"


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Legs:
    root = tmp_path_factory.mktemp("sharded")
    return Legs(SCRIPT, root, plan(root), leg_timeout=180, cwd=HERE, forked=True, fork_workers=True)


def train(legs, name):
    stderr = legs(name)
    return {**torch.load(legs.out(name)), "stderr": stderr}


def weight_sum(saved):
    return sum(float(t.double().sum()) for t in saved["state_dict"].values())


@pytest.fixture(scope="module")
def ddp_run(legs):
    return train(legs, "ddp")


@pytest.mark.parametrize("strategy", ["zero1", "sharded", "fsdp"])
def test_sharded_strategies_match_ddp_after_20_adam_steps(legs, ddp_run, strategy):
    saved = train(legs, strategy)
    assert saved["steps"] == 20
    assert abs(weight_sum(saved) - weight_sum(ddp_run)) <= 1e-4
    assert float(saved["metrics"]["val_loss"]) == pytest.approx(float(ddp_run["metrics"]["val_loss"]), abs=1e-4)
    held, reference = saved["memory"], ddp_run["memory"]
    # Per-rank local bytes at world size 2 (the ZeRO paper's 1/N of the sharded parts).
    assert held["optimizer_state"] <= 0.55 * reference["optimizer_state"]
    if strategy == "fsdp":
        assert held["parameters"] + held["optimizer_state"] <= 0.55 * (
            reference["parameters"] + reference["optimizer_state"]
        )
    if strategy in ("sharded", "fsdp"):
        assert held["gradients"] <= 0.55 * reference["gradients"]


def test_hsdp_on_a_2x2_mesh_matches_ddp(legs):
    reference, saved = train(legs, "ddp-4"), train(legs, "hsdp-4")
    assert abs(weight_sum(saved) - weight_sum(reference)) <= 1e-4
    assert saved["memory"]["parameters"] <= 0.55 * reference["memory"]["parameters"]  # sharded in pairs


def test_fsdp_clips_by_the_global_norm_and_accumulates_without_sync(legs):
    reference, saved = train(legs, "ddp-clipped"), train(legs, "fsdp-clipped")
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
    return FSDPStrategy(
        **options, placement=Placement("cpu", tuple(range(world)), 1, Precision("32", device_type="cpu"))
    )


def test_fsdp_on_a_model_without_parameters_is_a_clear_error():
    with pytest.raises(ValueError, match="has no parameters: there is nothing for fsdp to shard"):
        _bound().setup_module(nn.ReLU())


def test_hsdp_mesh_that_does_not_divide_the_world_is_a_clear_error():
    with pytest.raises(ValueError, match="shard groups of 3 processes do not divide the 4 processes"):
        _bound(world=4, shard_size=3).dims(4)


def test_fsdp_with_wrap_classes_and_activation_checkpointing_matches_ddp(legs, ddp_run):
    saved = train(legs, "fsdp-offload")
    assert abs(weight_sum(saved) - weight_sum(ddp_run)) <= 1e-4
    # CPU offload moves shards off an accelerator; on a CPU run it says it does nothing.
    assert "cpu_offload=True) has no effect on CPU" in saved["stderr"]


def test_fsdp_builds_configure_model_on_the_meta_device_and_trains(legs):
    saved = train(legs, "fsdp-meta")
    assert saved["built_on"] == "meta"
    assert saved["steps"] == 20
    weights = saved["state_dict"]
    assert all(torch.isfinite(t).all() and t.abs().sum() > 0 for t in weights.values())
    assert saved["metrics"]["train_loss_epoch"] < 1.45  # it learned (chance level is ln 4 = 1.386 at start)


@pytest.fixture(scope="module")
def fsdp_checkpoint(legs):
    """fsdp on 2 processes: a distributed checkpoint and the full weights it was taken from."""
    return legs.root / "fsdp.ckpt", torch.load(legs.out("dcp_save"))["state_dict"]


@pytest.mark.parametrize(("strategy", "devices"), [("single", 1), ("ddp", 2), ("fsdp", 4)])
def test_a_distributed_checkpoint_reshards_onto_another_layout(legs, fsdp_checkpoint, strategy, devices):
    directory, trained = fsdp_checkpoint
    assert (directory / ".metadata").exists() and len(list(directory.glob("*.distcp"))) == 2  # one per rank
    resumed = torch.load(legs.out(f"resume-{strategy}-{devices}"))
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
        save_distributed(
            {"state_dict": nn.Linear(3, 3).state_dict(), "epoch": 2}, target, rank=0, sharded_keys=["state_dict"]
        )
    monkeypatch.undo()
    fresh = nn.Linear(3, 3)
    loaded = load_distributed(target, {"state_dict": fresh.state_dict()})
    assert loaded["epoch"] == 1 and torch.equal(loaded["state_dict"]["weight"], model.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no half-written directory left


def test_distributed_checkpoints_saved_in_the_background_hold_the_state_of_their_step(legs, fsdp_checkpoint, tmp_path):
    """fsdp with AsyncCheckpointIO: step 20's checkpoint, written in the background, holds what the
    synchronous save of the same training (dcp_save) holds; step 10's is its own, earlier state."""
    from trainmesh.checkpoint.distributed import consolidate

    trained = torch.load(legs.out("dcp_save-async"))["state_dict"]
    synchronous, _ = fsdp_checkpoint
    folder = legs.root / "async"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt"]
    whole = {
        name: torch.load(consolidate(folder / name, tmp_path / name), weights_only=False)
        for name in ("epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt")
    }
    reference = torch.load(consolidate(synchronous, tmp_path / "sync.ckpt"), weights_only=False)
    assert whole["epoch=0-step=20.ckpt"]["global_step"] == 20 and whole["epoch=0-step=10.ckpt"]["global_step"] == 10
    for name, tensor in trained.items():
        assert torch.equal(whole["epoch=0-step=20.ckpt"]["state_dict"][name], tensor), name
        assert torch.equal(reference["state_dict"][name], tensor), name
    for a, b in zip(whole["epoch=0-step=20.ckpt"]["optimizer_states"], reference["optimizer_states"]):
        assert all(torch.equal(a["state"][k]["exp_avg"], b["state"][k]["exp_avg"]) for k in b["state"])
    assert not torch.equal(whole["epoch=0-step=10.ckpt"]["state_dict"]["head.weight"], trained["head.weight"])


def test_a_single_file_checkpoint_loads_into_a_sharded_run(legs):
    file, weights = legs.root / "ddp.ckpt", legs.out("dcp_save-ddp")
    assert file.is_file()
    out = legs.out("file-resume-fsdp-2")
    trained, resumed = torch.load(weights)["state_dict"], torch.load(out)["state_dict"]
    for name, tensor in trained.items():
        assert torch.equal(resumed[name], tensor), name


def test_predict_under_fsdp_returns_each_rank_s_own_predictions(legs):
    single = torch.load(legs.out("predict-single"))
    # 97 samples: each rank predicts samples r, r+2, ... (Lightning's shares) and returns them, as Lightning's
    # ranks: rank 0 4 batches, rank 1 3 and its last one again, unreturned (FSDP2 gathers the parameters at
    # every step: the ranks must run as many).
    for rank in (0, 1):
        sharded = torch.load(f"{legs.out('predict-fsdp')}-rank{rank}")
        torch.testing.assert_close(sharded, single[rank::2], rtol=0, atol=1e-6)


FIRST_SAVE = """
import sys, torch, trainmesh as tm
print("dcp imported at start:", "torch.distributed.checkpoint.state_dict" in sys.modules)
from torch.utils.data import DataLoader, TensorDataset
class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
class Seen(tm.Callback):
    def on_train_start(self, trainer, module):
        print("dcp imported before any save:", "torch.distributed.checkpoint.state_dict" in sys.modules)
trainer = tm.Trainer(strategy=tm.strategies.FSDPStrategy(state_dict_type="sharded"), devices=1, accelerator="cpu", max_steps=1, logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[Seen()])
trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2))
trainer.save_checkpoint(sys.argv[1])
print("saved:", sorted(p.name for p in __import__("pathlib").Path(sys.argv[1]).iterdir()))
"""


def test_fsdp_imports_dcp_as_it_sets_up_not_inside_its_first_save(tmp_path):
    """Issue 38: the first distributed save paid for importing torch's DCP (0.03-0.2 s), which a
    hand-written DCP script imports at its top: now the strategy's setup does (a process that had
    not imported it: a fork of the fork server, which has not, where it can be, else a new one)."""
    program = tmp_path / "first_save.py"
    program.write_text(FIRST_SAVE)
    done = run(str(program), str(tmp_path / "ckpt"), timeout=300, forked=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dcp imported at start: False" in done.stdout, done.stdout
    assert "dcp imported before any save: True" in done.stdout, done.stdout
    assert ".metadata" in done.stdout and "trainer_state.pt" in done.stdout, done.stdout


NO_OPTIMIZER = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainmesh as tm

class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(4, 4)
    def training_step(self, batch, batch_idx):
        self.net(batch[0]).sum()
    def configure_optimizers(self):
        return None
def trainer(epochs):
    return tm.Trainer(strategy=tm.strategies.FSDPStrategy(state_dict_type=sys.argv[2]), devices=1, accelerator="cpu",
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
data = DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)
first = trainer(1)
model = Net()
first.fit(model, data)
first.save_checkpoint(sys.argv[1])
print("saved")
if sys.argv[2] == "full":
    again = trainer(2)
    resumed = Net()
    again.fit(resumed, data, ckpt_path=sys.argv[1])
    trained = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    back = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in resumed.state_dict().items()}
    print("resumed", again.current_epoch, all(torch.equal(trained[k], back[k]) for k in trained))
"""


@pytest.mark.parametrize("layout", ["full", "sharded"])
def test_a_module_without_optimizers_saves_under_fsdp(tmp_path, layout):
    """configure_optimizers returning None (the stand-in optimizer, Lightning's _MockOptimizer, whose
    state dict is {}): torch's DCP state-dict helper failed on it (KeyError: 'state'), so every save
    under fsdp, a stop's included, wrote nothing; now {} is stored as Lightning stores it, and a
    full file resumes with the same weights."""
    program = tmp_path / "no_optimizer.py"
    program.write_text(NO_OPTIMIZER)
    done = run(str(program), str(tmp_path / "ckpt"), layout, timeout=300, forked=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "saved" in done.stdout, done.stdout
    if layout == "full":
        assert "resumed 2 True" in done.stdout, done.stdout
