"""What the ranks of a spawned ddp read in evaluation under ``limit_val_batches=1``, and the value
the launching process gets back, against Lightning 2.6.6.

Lightning gives each evaluation rank ``DistributedSampler(shuffle=False)``'s share (rank r: samples
r, r+2, ...), so with a limit of one batch of 4 its two ranks read samples 0..7 together: the
samples its one process reads at the global batch 8. Its ``ddp_spawn`` run of this program
(measured once, not run here: a launch of Lightning costs more than this test) returned
val_loss 1.9161861 (rank means 2.2171550 over 0, 2, 4, 6 and 1.6152171 over 1, 3, 5, 7), its
one process at batch 8 returned 1.9161860: the fixture below computes the latter, the cheap run.
trainmesh's evaluation shards used to be contiguous runs of the batches: with the limit, rank 0
read samples 0..3 and rank 1 samples 16..19, and the spawned run returned 0.6354858; then the
loader's batches dealt out in turn (rank 0: 0..3, rank 1: 4..7); now Lightning's shares.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from spawned_modules import EvaluationNet, EvaluationSteps, evaluation_data, evaluation_weights
from torch.utils.data import DistributedSampler

import trainmesh as tm
from helpers.forked import forkserver_strategy

pl = pytest.importorskip("lightning.pytorch")

SETTINGS = dict(
    accelerator="cpu",
    limit_val_batches=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)


class LightningNet(EvaluationSteps, pl.LightningModule):
    batch_size = 8  # the global batch of 2 processes at 4

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.layer.load_state_dict(evaluation_weights())


@pytest.fixture(scope="module")
def lightning_value() -> float:
    """Lightning 2.6.6, one process at the global batch, limit 1: its val_loss over samples 0..7."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (metrics,) = pl.Trainer(devices=1, **SETTINGS).validate(LightningNet(), verbose=False)
    return metrics["val_loss"]


@pytest.mark.slow
def test_spawned_validation_with_a_batch_limit_reads_and_returns_what_lightning_does(tmp_path, lightning_value):
    # ddp_spawn's launcher, workers forked (real spawn: test_launch_processes.py)
    trainer = tm.Trainer(strategy=forkserver_strategy(), devices=2, **SETTINGS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (metrics,) = trainer.validate(EvaluationNet(str(tmp_path)), verbose=False)
    read = [
        [i for line in (tmp_path / f"rank{r}.jsonl").read_text().splitlines() for i in json.loads(line)] for r in (0, 1)
    ]
    # Lightning's ranks read the first 4 indices of DistributedSampler's shares: together, samples 0..7.
    theirs = [list(DistributedSampler(evaluation_data(), num_replicas=2, rank=r, shuffle=False))[:4] for r in (0, 1)]
    assert read == theirs == [[0, 2, 4, 6], [1, 3, 5, 7]]  # each rank the first batch of its own share
    # sync_dist's mean over both ranks' batches (equal sizes), back in the launching process
    assert metrics["val_loss"] == pytest.approx(lightning_value, rel=1e-6)
    assert float(trainer.callback_metrics["val_loss"]) == pytest.approx(lightning_value, rel=1e-6)
