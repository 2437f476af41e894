"""Pipeline parallelism trained for real (strategies/pipeline.py under ModelParallelStrategy): the
schedules, clipping and accumulation against one process, and the pipeline's distributed checkpoints
(model_parallel_legs.py)."""

import pytest
import torch
from model_parallel_legs import CLIPPED, STEPS, assert_identical, assert_matches


@pytest.fixture
def legs(model_parallel_legs):
    """The legs shared with the other model-parallel test files (conftest.py): each runs once."""
    return model_parallel_legs


@pytest.mark.parametrize("layout", ["pp_gpipe", "pp_1f1b", "pp_interleaved"])
def test_pipeline_schedules_with_validation_match_one_process(legs, layout):
    # pp_1f1b is the run that also saves the checkpoint of the tests below (saving changes no weight).
    saved = legs.checkpoint("pp_1f1b")[1] if layout == "pp_1f1b" else legs(layout)
    assert_matches(saved, legs("single"))


def test_zero_bubble_v_schedule_matches_one_process_without_validation(legs):
    # V-shaped schedules refuse forward-only steps by design, so no validation here.
    assert_matches(legs("pp_zbv", val=0), legs("single", val=0), metrics=("train_loss",))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["pp_looped", "pp_izb"])
def test_the_other_multi_stage_schedules_match_one_process(legs, layout):
    # LoopedBFS and InterleavedZeroBubble (split input/weight backward), with validation.
    assert_matches(legs(layout), legs("single"))


@pytest.mark.slow
def test_dualpipev_matches_one_process_without_validation(legs):
    assert_matches(legs("pp_dualpipev", val=0), legs("single", val=0), metrics=("train_loss",))


def test_pipeline_clips_by_the_norm_of_every_stage(legs):
    assert_matches(legs("pp_1f1b", clip=0.05), legs("single", clip=0.05))


def test_pipeline_with_validation_clipping_and_accumulation_matches_one_process(legs):
    assert_matches(legs("pp_1f1b", **CLIPPED), legs("single", **CLIPPED), steps=STEPS // 2)


def test_pipeline_writes_a_distributed_checkpoint_with_every_stage(legs):
    path, _ = legs.checkpoint("pp_1f1b")
    assert path.is_dir() and (path / ".metadata").exists()
    assert len(list(path.glob("*.distcp"))) == 2  # one per stage


@pytest.mark.slow
def test_pipeline_checkpoint_resumes_on_one_process_with_the_same_weights(legs):
    path, trained = legs.checkpoint("pp_1f1b")
    resumed = legs("single", resume=path.name)  # epochs=2, as saved: no training step runs
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)


def test_consolidated_pipeline_checkpoint_holds_the_whole_trained_model(legs, tmp_path):
    from trainmesh.cli.main import main

    path, trained = legs.checkpoint("pp_1f1b")
    target = tmp_path / "whole.ckpt"
    assert main(["checkpoint", "consolidate", str(path), str(target)]) == 0
    whole = torch.load(target, weights_only=False)
    assert whole["global_step"] == STEPS
    assert_identical({"state_dict": whole["state_dict"]}, trained)
    # Adam's moments of both stages' parameters.
    (optimizer,) = whole["optimizer_states"]
    assert sorted(optimizer["state"]) == sorted(trained["state_dict"])
    assert all({"exp_avg", "exp_avg_sq"} <= set(state) for state in optimizer["state"].values())


@pytest.mark.slow
def test_pipeline_checkpoint_resumes_under_the_same_pipeline_with_the_same_weights(legs):
    path, trained = legs.checkpoint("pp_1f1b")
    resumed = legs("pp_1f1b", resume=path.name)
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)


def test_consolidated_pipeline_checkpoint_optimizer_groups_name_every_parameter(legs, tmp_path):
    from trainmesh.checkpoint.distributed import consolidate

    path, trained = legs.checkpoint("pp_1f1b")
    whole = torch.load(consolidate(path, tmp_path / "whole.ckpt"), weights_only=False)
    (optimizer,) = whole["optimizer_states"]
    assert sorted(p for group in optimizer["param_groups"] for p in group["params"]) == sorted(trained["state_dict"])


def test_a_pipelined_steps_output_takes_the_form_one_process_gives():
    # The last stage's micro-batch outputs (2 micro-batches of 3 rows) made into the whole batch's,
    # as shared_step_result gives them to every stage (here one process: no message to send).
    from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
    from trainmesh.strategies.pipeline import shared_step_result

    mesh = ParallelMesh(ParallelDims(dp_shard=1).resolved(1))

    def shared(outputs, counts):
        losses = [torch.tensor(2.0), torch.tensor(4.0)]
        return shared_step_result(
            losses, counts, outputs, rows=3, owner="Net", mesh=mesh, stage_rank=0, device=torch.device("cpu")
        )

    loss, count, output = shared(["a", "b"], [None, None])  # training_step returned its mean loss
    assert count is None and torch.equal(output, loss) and float(loss) == 3.0
    rows, note = [torch.arange(3), torch.arange(3, 6)], [{"k": 1}, {"k": 2}]
    outputs = [{"loss": 1, "num_tokens": 5, "rows": r, "note": n, "acc": torch.tensor(0.5)} for r, n in zip(rows, note)]
    loss, count, output = shared(outputs, [torch.tensor(5.0, dtype=torch.float64)] * 2)
    assert list(output) == ["loss", "num_tokens", "rows", "note", "acc"]
    assert float(output["loss"]) == 6.0 and float(output["num_tokens"]) == 10.0  # sums over the micro-batches
    assert torch.equal(output["rows"], torch.arange(6))  # a row per sample: the batch's rows in order
    assert output["note"] == note and [float(a) for a in output["acc"]] == [0.5, 0.5]  # else one per micro-batch
