"""What each rank evaluates under ddp at 2 processes, against Lightning 2.6's own ddp run.

Lightning's Trainer gives every validation and test loader ``DistributedSampler(shuffle=False)``
(rank r: samples r, r+2, ..., the last padded by repeating the first, so every rank runs as many
batches and none is empty; a shuffling loader's order is the permutation of the fit's processed
epochs, as Lightning sets the sampler's epoch) and every predict loader ``UnrepeatedDistributedSamplerWrapper`` (no
padding: a rank may run a batch fewer). One launch per framework (tests/trainer/evaluation_shares_run.py,
in the launch conftest.py's ``lightning_ddp`` shares among five files) runs: ``trainer.test`` on 100 samples at batch 16 with a ``test_step`` that flattens its batch with
``x.view(x.size(0), -1)`` (trainmesh used to deal the 7 batches out in turn and hand rank 1 an
empty fourth batch, which crashed it), ``trainer.validate`` on 101 samples (Lightning repeats
sample 0 on rank 1), with ``limit_val_batches=2``, a fit's sanity check and validation, and
``trainer.predict`` on 33 samples (rank 0: 2 batches, rank 1: 1). Each rank's samples at every
step, the synced epoch metrics and Lightning's warning about the padding are Lightning's (slow:
the shared launches). Below them, without processes: where each step is a collective (fsdp), the step
counts are evened out or refused (``steps_owed``).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainmesh.trainer.evaluation_shares import steps_owed

CASES = [
    "test_100",
    "validate_101",
    "validate_limit",
    "fit_sanity",
    "fit_batchnorm",
    "fit_batchnorm_then_test",
    "validate_unsynced",
    "test_means",
    "fit_shuffled_then_test",
    "predict_33",
]


@pytest.fixture(scope="module")
def records(lightning_ddp):
    """Lightning's run and trainmesh's (conftest.py's ``lightning_ddp``: one launch a framework, shared
    with four other files; Lightning's ddp starts the second process itself, as its owners define it)."""
    return lightning_ddp


def _load(out: Path, framework: str, case: str, rank: int) -> dict:
    return torch.load(out / framework / "evaluation_shares_run" / f"{case}-rank{rank}.pt", weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_each_rank_evaluates_lightning_s_samples(records, case, rank):
    theirs, ours = _load(records, "lightning", case, rank), _load(records, "trainmesh", case, rank)
    assert ours["seen"] == theirs["seen"]
    assert ours["warnings"] == theirs["warnings"]


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize(
    "case",
    [
        "test_100",
        "validate_101",
        "validate_limit",
        "fit_sanity",
        "fit_batchnorm",
        "fit_batchnorm_then_test",
        "fit_shuffled_then_test",
    ],
)
def test_the_synced_epoch_metric_is_lightning_s(records, case, rank):
    """fit_batchnorm: Lightning validates during fit through DDP's forward, which gives every rank
    rank 0's BatchNorm running statistics first; trainmesh took them too (each rank validated with its
    own before: the hydra template's val/acc was one sample in 300 apart); fit_batchnorm_then_test: so does
    its test_step after a fit without validation (each rank tested with its own before: SWA's BatchNorm
    model's test_loss 0.583 against Lightning's 0.172, l-ddp-progs3 e3). fit_shuffled_then_test:
    Lightning sets a shuffled evaluation loader's epoch to the fit's processed epochs (the dl-fundamentals
    program's ``trainer.validate(dataloaders=dm.train_dataloader())`` after fit: its train_acc differed)."""
    theirs, ours = _load(records, "lightning", case, rank), _load(records, "trainmesh", case, rank)
    assert ours["callback_metrics"].keys() == theirs["callback_metrics"].keys()
    for name, value in theirs["callback_metrics"].items():
        assert ours["callback_metrics"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name
    if "returned" in theirs:
        assert [list(m) for m in ours["returned"]] == [list(m) for m in theirs["returned"]]
        for mine, their in zip(ours["returned"], theirs["returned"], strict=True):
            assert mine == pytest.approx(their, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_epoch_means_are_lightning_s_to_the_bit(records, rank):
    """Float32, float64, a number and a sum, with and without ``sync_dist``, over each rank's 16, 16,
    16 and 2 samples: Lightning's float32 arithmetic (trainmesh summed in float64 before, and the
    values differed in their last bits). The values as ``trainer.test`` returns them and their dtypes."""
    theirs, ours = _load(records, "lightning", "test_means", rank), _load(records, "trainmesh", "test_means", rank)
    assert ours["dtypes"] == theirs["dtypes"]
    assert ours["callback_metrics"] == theirs["callback_metrics"]
    assert ours["returned"] == theirs["returned"]


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_predict_returns_each_rank_s_own_predictions(records, rank):
    """Lightning returns each rank's own predictions (rank r: samples r, r+2, ..., unpadded: 17 and
    16); trainmesh gathered every rank's, in the loader's order, on every rank (a program that merges
    the ranks' results counted them twice)."""
    theirs = _load(records, "lightning", "predict_33", rank)["predictions"]
    assert len(theirs) == [17, 16][rank]
    torch.testing.assert_close(
        _load(records, "trainmesh", "predict_33", rank)["predictions"], theirs, rtol=0, atol=1e-6
    )


@pytest.mark.slow
def test_what_lightning_reads(records):
    """The owner's run, as measured: rank 1's test batches are 16, 16, 16 and 2 samples (none
    empty); validation of 101 samples repeats sample 0 at rank 1's end; each rank's limit of 2
    batches reads the first 2 of its own share; trainer.test/validate warn on rank 0 only."""
    test = _load(records, "lightning", "test_100", 1)
    assert [len(batch) for _, batch in test["seen"]] == [16, 16, 16, 2]
    assert test["seen"][0][1] == list(range(1, 32, 2))
    assert _load(records, "lightning", "validate_101", 1)["seen"][-1][1] == [97, 99, 0]
    assert _load(records, "lightning", "validate_limit", 0)["seen"] == [
        ("val", list(range(0, 32, 2))),
        ("val", list(range(32, 64, 2))),
    ]
    assert len(_load(records, "lightning", "test_100", 0)["warnings"]) == 1 and not test["warnings"]
    assert not _load(records, "lightning", "fit_sanity", 0)["warnings"]


@pytest.mark.slow
def test_an_epoch_value_logged_without_sync_dist_gets_lightning_s_advice(records):
    """``self.log("val_plain", loss)`` in ``validation_step`` under ddp: Lightning's rank 0 warns once
    that ``sync_dist=True`` is recommended (trainmesh gave no such warning)."""
    advice = "It is recommended to use `self.log('val_plain', ..., sync_dist=True)` when logging on epoch level"
    for framework in ("lightning", "trainmesh"):
        warned = [
            [w for w in _load(records, framework, "validate_unsynced", rank)["warnings"] if "sync_dist" in w]
            for rank in (0, 1)
        ]
        assert len(warned[0]) == 1 and warned[0][0].startswith(advice) and warned[1] == [], framework


@pytest.mark.slow
def test_an_epoch_value_logged_without_sync_dist_stays_rank_local(records):
    """Without ``sync_dist`` Lightning's epoch value is each rank's own mean over its share (it
    differs between the ranks); trainmesh reduced it across the ranks."""
    for rank in (0, 1):
        theirs = _load(records, "lightning", "validate_unsynced", rank)["callback_metrics"]["val_plain"]
        ours = _load(records, "trainmesh", "validate_unsynced", rank)["callback_metrics"]["val_plain"]
        assert ours == pytest.approx(theirs, rel=1e-6)
    lightning = [_load(records, "lightning", "validate_unsynced", rank)["callback_metrics"] for rank in (0, 1)]
    assert lightning[0]["val_plain"] != pytest.approx(lightning[1]["val_plain"], rel=1e-3)
    assert lightning[0]["val_loss"] == pytest.approx(lightning[1]["val_loss"], rel=1e-6)  # sync_dist: one value


# ---- evening out the steps where each step is a collective (fsdp), without processes --------------
def context(mine: int, others: int, *, shards: bool = True) -> SimpleNamespace:
    """A loop context on rank 0 of 2 whose peer ran ``others`` steps: the Runtime's max-reduction."""

    def all_reduce(value, op):
        assert op == "max"
        return torch.maximum(value, torch.tensor([others, -others], dtype=value.dtype))

    capabilities = SimpleNamespace(shards_parameters=shards)
    runtime = SimpleNamespace(
        world_size=2, capabilities=capabilities, device="cpu", strategy_name="fsdp", all_reduce=all_reduce
    )
    return SimpleNamespace(runtime=runtime)


def test_a_rank_with_a_predict_batch_fewer_owes_a_step_only_where_steps_are_collectives():
    assert steps_owed(context(1, 2), "predict", [1]) == 1
    assert steps_owed(context(2, 1), "predict", [2]) == 0
    assert steps_owed(context(1, 2, shards=False), "predict", [1]) == 0  # ddp: no collective in a step
    assert steps_owed(context(3, 3), "validate", [1, 2]) == 0


def test_uneven_evaluation_under_gathering_strategies_is_refused_before_the_first_step():
    with pytest.raises(ValueError, match="validate loaders give different numbers of batches \\(2 to 3\\).*fsdp"):
        steps_owed(context(2, 3), "validate", [2])
    with pytest.raises(ValueError, match="a process has no sample to predict.*at least as many samples"):
        steps_owed(context(0, 1), "predict", [0])
