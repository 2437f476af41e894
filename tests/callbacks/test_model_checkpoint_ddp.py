"""ModelCheckpoint and EarlyStopping on a metric that differs by rank, under ddp at 2 processes,
against Lightning 2.6's own ddp run (callbacks/model_checkpoint_ddp_run.py: one launch per framework).

Lightning's ranks decide together whether a value enters a full top k (``check_monitor_top_k``:
every rank's value must) and whether to stop (any rank's check). trainmesh's ModelCheckpoint
decided on each rank's own value: where rank 0's value entered and rank 1's did not, rank 0 went
into the save's collectives alone and the run hung (stopped by the 600 s timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.beside_lightning import run_beside_lightning

pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "model_checkpoint_ddp_run.py"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpoint_ddp")
    run_beside_lightning(SCRIPT, out, lightning_starts=False)  # asserts that both ended (no hang) with status 0
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_a_metric_differing_by_rank_saves_and_stops_as_lightning_s_ddp(records, rank):
    theirs = torch.load(records / "lightning" / f"rank{rank}.pt", weights_only=False)
    ours = torch.load(records / "trainmesh" / f"rank{rank}.pt", weights_only=False)
    values = [torch.load(records / "lightning" / f"rank{r}.pt", weights_only=False)["values"] for r in (0, 1)]
    assert values[0][4] < min(values[0][:4]) and values[1][4] > min(values[1][:4])  # epoch 4: rank 0's enters alone
    assert theirs["files"] == ["epoch=3.ckpt"]  # so epoch 4 is not saved, and both ranks stop there
    assert ours["files"] == theirs["files"] and ours["values"] == pytest.approx(theirs["values"], rel=1e-6)
    assert ours["best_score"] == pytest.approx(theirs["best_score"], rel=1e-6)  # each rank its own score
    assert (ours["stopped_epoch"], ours["current_epoch"]) == (theirs["stopped_epoch"], theirs["current_epoch"])
    for name, value in theirs["weights"].items():
        assert torch.allclose(ours["weights"][name], value, rtol=0, atol=1e-6), name
