"""StochasticWeightAveraging on a model with batch norm under ``strategy="ddp"`` (two CPU processes,
swa_batch_norm_ddp_run.py), Lightning's ddp beside trainmesh's."""

import pytest
import torch

pytest.importorskip("lightning.pytorch")


@pytest.mark.slow
def test_batch_norm_epoch_under_ddp_as_lightnings(tmp_path):
    """Two CPU processes under strategy="ddp" (swa_batch_norm_ddp_run.py), Lightning's ddp beside
    trainmesh's: each rank's weights and batch-norm buffers (DDP gives every rank rank 0's) bit-identical,
    the forward-only epoch's training steps, the end's epoch and step, the SWA state, the metrics."""
    import os
    from pathlib import Path

    from helpers.forked import can_fork, run_forked
    from helpers.processes import run_program

    script = Path(__file__).parent / "swa_batch_norm_ddp_run.py"
    for name in ("lightning", "trainmesh"):
        if can_fork():  # both on 2 forks in one process group (as helpers/beside_lightning.py runs trainmesh's):
            # Lightning's Trainer finds its processes started (LOCAL_RANK set, as under torchrun); Lightning
            # imported once before the 2 forks (helpers/forked.py's preload), never in trainmesh's
            preload = ("lightning.pytorch",) if name == "lightning" else ()
            args = [name, str(tmp_path / name)]
            done = run_forked(script, args, env=dict(os.environ), timeout=600, cwd=tmp_path, world=2, preload=preload)
        else:
            done = run_program([str(script), name, str(tmp_path / name)], timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        theirs, ours = (
            torch.load(tmp_path / n / f"rank{rank}.pt", weights_only=False) for n in ("lightning", "trainmesh")
        )
        for key in ("weights", "average"):
            for name, value in theirs[key].items():
                assert torch.equal(ours[key][name], value), (rank, key, name)
        assert ours["extra_epoch"] == theirs["extra_epoch"] == [(3, i, 12, 4, 5) for i in range(4)]
        assert ours["end"] == theirs["end"] == (4, 13, 3)
        assert ours["swa"] == theirs["swa"]
        assert ours["logged"] == theirs["logged"]
