"""trainmesh.Fabric beside Lightning Fabric 2.6 on 2 processes under ``strategy="ddp"``.

One launch per framework (fabric_ddp_run.py; helpers/beside_lightning.py: each on 2 forks in one
process group, Lightning's Fabric finding its processes started, as under torchrun) checks at once: the
samples each rank reads, the weights after gradient accumulation with ``no_backward_sync`` and
clipping (bit-identical), a method marked as a forward, the collectives' results (all_reduce in place, as Fabric's), the checkpoint's
keys, what ``load`` restores, the set-up module's submodule and parameter names, the callbacks' calls and the CSV logger's rows; then Fabric's
``ModelParallelStrategy(parallelize_fn)``: the mesh it is given, the whole weights (bit-identical).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.beside_lightning import run_beside_lightning

pytest.importorskip("lightning.fabric")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "fabric_ddp_run.py"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fabric_ddp")
    run_beside_lightning(SCRIPT, folder, lightning_ranks=2, imports=("lightning.fabric",))
    return folder


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_reads_trains_and_talks_as_lightning_fabric(out, rank):
    theirs = torch.load(out / "lightning" / f"rank{rank}.pt", weights_only=False)
    ours = torch.load(out / "trainmesh" / f"rank{rank}.pt", weights_only=False)
    assert ours["seen"] == theirs["seen"]
    assert ours["weights"].keys() == theirs["weights"].keys()
    assert all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in theirs["weights"])
    for key in ("gathered", "sent", "total", "in_place", "first", "step", "calls", "ranks", "names"):
        assert ours[key] == theirs[key], key
    (our_meshes, our_weights), (their_meshes, their_weights) = ours["model_parallel"], theirs["model_parallel"]
    assert our_meshes == their_meshes == [(("data_parallel", "tensor_parallel"), (1, 2))]
    assert our_weights.keys() == their_weights.keys()
    assert all(torch.equal(our_weights[k], their_weights[k]) for k in their_weights)


def test_the_checkpoint_and_the_logged_rows_are_lightning_fabric_s(out):
    theirs = torch.load(out / "lightning" / "state.ckpt", weights_only=False)
    ours = torch.load(out / "trainmesh" / "state.ckpt", weights_only=False)
    assert ours.keys() == theirs.keys()
    assert ours["model"].keys() == theirs["model"].keys()
    assert ours["optimizer"]["param_groups"] == theirs["optimizer"]["param_groups"]
    metrics = Path("lightning_logs", "version_0", "metrics.csv")
    assert (out / "trainmesh" / metrics).read_text() == (out / "lightning" / metrics).read_text()
