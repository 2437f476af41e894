"""Model parallelism trained for real: ModelParallelStrategy's compositions (FSDP x TP, pipeline x
TP, pipeline x replicate, pipeline x FSDP (x TP)), evaluation after fit and checkpoints across
layouts, in real processes on gloo, each against one process training the same model on the same
data. The legs, their tolerance and the comparisons are in model_parallel_legs.py, shared with
test_pipeline.py and test_tensor_parallel.py.
"""

import pytest
import torch
from model_parallel_legs import (
    ATOL,
    CLIPPED,
    STEPS,
    assert_identical,
    assert_matches,
    max_difference,
)


@pytest.fixture
def legs(model_parallel_legs):
    """The legs shared with the other model-parallel test files (conftest.py): each runs once."""
    return model_parallel_legs


@pytest.mark.slow
def test_pipeline_x_tensor_parallel_with_activation_checkpointing_matches_one_process(legs):
    # pp=2 x tp=2 on 4 processes, each block recomputed in backward: the cut, TP, then checkpointing.
    assert_matches(legs("pp_tp_ac"), legs("single"))


@pytest.mark.slow
def test_fsdp_x_tp_matches_one_process(legs):
    # tp pairs sharded by FSDP across them; the run that also saves the fsdp_tp checkpoint below.
    assert_matches(legs.checkpoint("fsdp_tp")[1], legs("single"))


@pytest.mark.slow
def test_pipeline_x_replicate_with_validation_matches_one_process(legs):
    # Two pipelines of 2 stages, replicated by FSDP2's replicate; evaluation runs through the pipeline.
    assert_matches(legs("pp_replicate"), legs("single"))


def test_clipping_really_clips_in_the_reference(legs):
    """Without this, the clipped comparisons below would pass with clipping ignored."""
    clipped, unclipped = legs("single", **CLIPPED), legs("single", accumulate=2)
    assert clipped["steps"] == unclipped["steps"] == STEPS // 2
    assert max_difference(clipped, unclipped) > 100 * ATOL  # measured 6.4e-3
    assert max_difference(legs("single", clip=0.05), legs("single")) > 100 * ATOL  # measured 1.3e-2


@pytest.mark.slow
def test_fsdp_x_tp_accumulates_like_one_process(legs):
    assert_matches(legs("fsdp_tp", accumulate=2), legs("single", accumulate=2), steps=STEPS // 2)


@pytest.mark.slow
def test_fsdp_x_tp_with_validation_clipping_and_accumulation_matches_one_process(legs):
    assert_matches(legs("fsdp_tp", **CLIPPED), legs("single", **CLIPPED), steps=STEPS // 2)


@pytest.mark.slow
def test_pipeline_x_fsdp_with_validation_matches_one_process(legs):
    # Evaluation batches differ in size between the data-parallel shards (24 and 16 samples):
    # the shards are gathered once per batch on both, so the FSDP collectives stay paired.
    assert_matches(legs("pp_fsdp"), legs("single"))


@pytest.mark.slow
def test_pipeline_x_fsdp_x_tensor_parallel_on_eight_processes_matches_one_process(legs):
    # 3-D: pp=2 stages x dp_shard=2 shards x tp=2 ways, with validation; one epoch (the second
    # epoch's reshuffle is checked by the other layouts).
    assert_matches(legs("pp_fsdp_tp", epochs=1), legs("single", epochs=1), steps=STEPS // 2)


@pytest.mark.parametrize("layout", ["pp_1f1b", "fsdp_tp"])
def test_test_and_predict_after_fit_match_one_process(legs, layout):
    # 37 samples: each data-parallel shard ends with a short batch, run in fewer micro-batches.
    # fsdp_tp's 2 data-parallel ranks test 38 (Lightning's DistributedSampler repeats sample 0).
    got, expected = legs(layout, evaluate=1), legs("single", evaluate=1)
    reference = {"pp_1f1b": "test", "fsdp_tp": "test_two_ranks"}[layout]
    assert got["test"][0]["test_loss"] == pytest.approx(expected[reference][0]["test_loss"], abs=ATOL)
    # predict returns each rank's own predictions, as Lightning's: rank 0's share under fsdp_tp's 2 ranks
    predicted = {"pp_1f1b": "predictions", "fsdp_tp": "predictions_rank_0"}[layout]
    assert got["predictions"].shape == expected[predicted].shape == {"pp_1f1b": (37, 4), "fsdp_tp": (19, 4)}[layout]
    torch.testing.assert_close(got["predictions"], expected[predicted], rtol=0, atol=ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["pp_1f1b", "fsdp_tp"])
def test_a_model_parallel_checkpoint_continues_on_one_process_like_an_uninterrupted_run(legs, layout):
    path, _ = legs.checkpoint(layout)
    assert_matches(legs("single", resume=path.name, epochs=3), legs("single", epochs=3), steps=STEPS * 3 // 2)


@pytest.mark.slow
def test_fsdp_x_tp_checkpoint_resumes_under_ddp_with_the_same_weights(legs):
    path, trained = legs.checkpoint("fsdp_tp")
    assert path.is_dir() and len(list(path.glob("*.distcp"))) == 4
    resumed = legs("ddp", resume=path.name)  # epochs=2, as saved: no training step runs
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)


@pytest.mark.slow
def test_a_resumed_epoch_reports_its_own_train_loss(legs):
    path, _ = legs.checkpoint("fsdp_tp")
    resumed, uninterrupted = legs("single", resume=path.name, epochs=3), legs("single", epochs=3)
    assert float(resumed["metrics"]["train_loss"]) == pytest.approx(
        float(uninterrupted["metrics"]["train_loss"]), abs=ATOL
    )
