"""Trainer.full_state_dict() (Runtime.full_state_dict): called on every rank after fit, rank 0
gets the whole model's weights, exactly those one process trains on the same data (within
model_parallel_legs.ATOL, 1e-5: the layouts' float32 sums in another order), under one
process's names, and the other ranks None; Trainer.save_checkpoint(path), called on every rank,
writes those same weights, under single, ddp, fsdp, tp and a pipeline (pp=2).

Two launches: one process (the reference), and the 2-process layouts one after another in one
launch (full_state_run.py).
"""

from pathlib import Path

import pytest
import torch
from legs import HERE, run
from model_parallel_legs import ATOL

LAYOUTS = ("ddp", "fsdp", "tp", "pp_1f1b")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full_state")
    script = str(HERE / "full_state_run.py")
    # Forks of a process that imported torch already (helpers/forked.py), the layouts' two as one
    # process group that their Trainers find started: nothing here tests how processes start.
    single = run(script, str(out), "single", timeout=120, forked=True)
    assert single.returncode == 0, single.stderr[-3000:]
    layouts = run(script, str(out), *LAYOUTS, timeout=400, forked=True, world=2)
    assert layouts.returncode == 0, layouts.stderr[-4000:]
    return out


def _saved_weights(path: Path, scratch: Path) -> dict[str, torch.Tensor]:
    """The weights in a checkpoint: a file, or a distributed checkpoint made into one."""
    if path.is_dir():
        from trainmesh.checkpoint.distributed import consolidate

        path = consolidate(path, scratch / f"{path.name}.consolidated")
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.parametrize("layout", ["single", *LAYOUTS])
def test_rank_0_gets_the_weights_one_process_trained_and_save_checkpoint_writes_them(outputs, layout, tmp_path):
    reference = torch.load(outputs / "single.pt")["full"]
    full = torch.load(outputs / f"{layout}.pt")["full"]
    assert sorted(full) == sorted(reference)  # every layer, under one process's names
    for name, tensor in reference.items():
        assert full[name].device.type == "cpu" and not hasattr(full[name], "device_mesh"), name  # no DTensor
        torch.testing.assert_close(full[name], tensor, rtol=0, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")
    if layout != "single":
        assert (outputs / f"{layout}.rank1").read_text() == "None"
    saved = _saved_weights(outputs / f"{layout}.ckpt", tmp_path)
    assert sorted(saved) == sorted(full)
    for name, tensor in full.items():
        assert torch.equal(saved[name], tensor), name
