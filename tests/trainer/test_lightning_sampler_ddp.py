"""What each rank trains on under ddp at 2 processes, against Lightning 2.6's own ddp run.

With its default ``use_distributed_sampler=True``, Lightning's Trainer gives every training loader
``DistributedSampler(shuffle=True, seed=PL_GLOBAL_SEED or 0)`` (``shuffle=False`` under
``overfit_batches``; a sampler of one's own through ``DistributedSamplerWrapper``, which permutes
it alike) and calls ``set_epoch`` each epoch. One launch per framework
(tests/trainer/sampler_ddp_run.py, in conftest.py's shared ``lightning_ddp`` launch) runs 2 epochs of 32 samples at batch 4 for each case: a
``shuffle=False`` loader before any ``seed_everything`` and after ``seed_everything(17)``, a
``shuffle=True`` one, a sampler of one's own, ``overfit_batches=2``, a dict of two loaders (Lightning's
``CombinedLoader(mode="max_size_cycle")``, each loader sharded: 13 samples padded to 14), a fit
with a ``LearningRateFinder`` (its search on each rank, rank 0's results: the suggestion, the samples
and weights of the fit after), and a fit resumed mid-epoch.
Each rank's samples at every step are Lightning's rank's, exactly, and the trained weights
Lightning's (to float noise). fsdp and zero1 (trainmesh's, in the same launch) read what
Lightning's ddp ranks read: Lightning's strategies share one sampler. A pytorch-lightning 1.x module
(same launch) reads what 1.9.5's ranks read (helpers/lightning_1_9_sampler_ddp.json), and one with a
head its loss never reads trains as under 1.9.5's ddp (find_unused_parameters True unless given).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow

RECORDED_1_9 = Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_sampler_ddp.json"
CASES = ["unseeded_in_order", "in_order", "shuffled", "own_sampler", "overfit", "combined", "lr_find"]


@pytest.fixture(scope="module")
def records(lightning_ddp):
    """Lightning's run and trainmesh's (conftest.py's ``lightning_ddp``: one launch a framework, shared
    with four other files; Lightning's ddp starts the second process itself, as its owners define it).
    Neither sees a PL_GLOBAL_SEED from outside: the first case's seed is the default, 0."""
    return lightning_ddp


def _load(out: Path, framework: str, case: str, rank: int) -> dict:
    return torch.load(out / framework / "sampler_ddp_run" / f"{case}-rank{rank}.pt", weights_only=False)


def _same_weights(ours: dict, theirs: dict) -> bool:
    return ours.keys() == theirs.keys() and all(torch.allclose(ours[k], theirs[k], rtol=0, atol=1e-6) for k in theirs)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_each_rank_trains_on_lightning_s_samples(records, case, rank):
    theirs, ours = _load(records, "lightning", case, rank), _load(records, "trainmesh", case, rank)
    assert ours["seen"] == theirs["seen"]
    assert _same_weights(ours["weights"], theirs["weights"])
    assert ours["lr"] == theirs["lr"]  # lr_find: the suggestion each rank set (rank 0's search results)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize(("ours_case", "their_case"), [("fsdp_in_order", "in_order"), ("zero1_shuffled", "shuffled")])
def test_fsdp_and_zero1_read_lightning_s_ddp_samples(records, ours_case, their_case, rank):
    theirs, ours = _load(records, "lightning", their_case, rank), _load(records, "trainmesh", ours_case, rank)
    assert ours["seen"] == theirs["seen"]
    assert _same_weights(ours["weights"], theirs["weights"])


def test_what_lightning_reads(records):
    """The owner's run, as measured: a shuffle=False loader is shuffled with seed 0 before any
    seed_everything (rank 0's first batch 12, 25, 19, 9), with the seed after one, anew each
    epoch; under overfit_batches it is read in order (rank r: samples r, r+2, ...)."""
    unseeded = _load(records, "lightning", "unseeded_in_order", 0)["seen"]
    assert unseeded[0] == (0, [12, 25, 19, 9])
    seeded = _load(records, "lightning", "in_order", 0)["seen"]
    assert seeded[0] != unseeded[0] and seeded[0][1] != seeded[4][1] and seeded[4][0] == 1
    overfit = [_load(records, "lightning", "overfit", rank)["seen"] for rank in (0, 1)]
    assert overfit[0][:2] == [(0, [0, 2, 4, 6]), (0, [8, 10, 12, 14])]
    assert overfit[1][0] == (0, [1, 3, 5, 7])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_mid_epoch_resume_reads_what_lightning_s_resume_reads(records, rank):
    """A fit resumed from the checkpoint written after step 2 of the first epoch (of 4, shuffle=True):
    Lightning's resume reads the epoch's first 2 batches again (its DataLoader is not resumable: it says
    so in a warning), then the next epoch, so its weights are not the unstopped fit's; trainmesh's ranks
    read the same batches to the same weights (before: they read that epoch's batches 3 and 4, the
    exact resume, which ``Trainer(exact_resume=True)`` keeps)."""
    whole = _load(records, "lightning", "shuffled", rank)
    ours, theirs = _load(records, "trainmesh", "resumed", rank), _load(records, "lightning", "resumed", rank)
    assert theirs["seen"] == whole["seen"][:2] + whole["seen"][4:]
    assert ours["seen"] == theirs["seen"]
    assert _same_weights(ours["weights"], theirs["weights"])
    assert not _same_weights(theirs["weights"], whole["weights"])


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("case", ["lightning1_shuffled", "lightning1_unused_head"])
def test_a_lightning1_module_reads_1_9_5_s_samples(records, case, rank):
    """pytorch-lightning 1.9.5 deals a loader's RandomSampler out through ``DistributedSamplerWrapper``
    (data_connector.py ``_get_distributed_sampler``): each epoch the sampler draws a permutation from the
    rank's global generator, which the wrapper permutes again with ``seed + epoch`` and splits. Lightning 2
    shards the dataset with ``DistributedSampler`` instead, so a 1.x program read other samples (rank 0's
    first batch 15, 13, 26, 8 where 1.9.5's is 6, 12, 20, 11) and trained to other weights. Training and
    the shuffled validation loader (sanity check included), each step, and the weights: 1.9.5's.
    ``lightning1_unused_head`` adds a head the loss never reads: 1.9.5's ``strategy="ddp"`` sets
    ``find_unused_parameters=True`` where the program gives none, and trains; with 2.x's default (False)
    trainmesh stopped at the second step with DDP's unused-parameter error.
    Each rank's ModelCheckpoint names its best file from its own unsynced ``val_loss``, as 1.9.5's (and
    2.6's) ranks do: trainmesh gave every rank rank 0's name, so rank 1's ``best_model_path`` read
    ``val_loss=0.2264`` where 1.9.5's reads ``val_loss=1.0112``."""
    theirs = json.loads(RECORDED_1_9.read_text())[case][str(rank)]
    ours = _load(records, "trainmesh", case, rank)
    assert [[epoch, seen] for epoch, seen in ours["seen"]] == theirs["seen"]
    assert [[epoch, seen] for epoch, seen in ours["seen_val"]] == theirs["seen_val"]
    assert ours["best"] == theirs["best"]
    assert _same_weights(ours["weights"], {k: torch.tensor(v) for k, v in theirs["weights"].items()})
