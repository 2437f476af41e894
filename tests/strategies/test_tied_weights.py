"""Tied weights (the Llama's output head sharing the token embedding's matrix) under tensor and
pipeline parallelism train like one process, or are refused before training.

Legs of tied_run.py, batched per world size (helpers/batches.py). Every layout trains 5 AdamW
steps (eps 1e-5: tied_run.py says why) on the same global batches as one process; weights
within ATOL of it (float32 reordering), the tied names bit-equal on every rank. Untied by mistake (each stage
or plan entry training its own copy) they differ from one process by about 1e-3.
"""

import weakref
from pathlib import Path

import pytest
import torch
from legs import HERE
from torch import nn

from helpers.batches import Batches

PROGRAM = HERE / "tied_run.py"
ATOL = 1e-5
TIED = ("tok_embeddings.weight", "output.weight")
CLIPPED = ["clip=0.05", "accumulate=2"]


def plan(root: Path) -> list:
    def leg(name, world, *args):
        return (
            name,
            world,
            [a.replace("OUT", str(root / f"{name}.pt")).replace("CKPT", str(root / "pp.ckpt")) for a in args],
            {},
        )

    return [
        leg("tp", 2, "train", "tp", "OUT"),
        leg("tp_user", 2, "train", "tp_user", "OUT"),
        leg("tp_user_meta", 2, "train", "tp_user_meta", "OUT"),
        leg("tp_user_mismatch", 2, "refuse", "tp_user_mismatch", "OUT"),
        leg("tp_user_whole", 2, "refuse", "tp_user_whole", "OUT"),
        leg("pp", 2, "train", "pp", "OUT"),
        leg("pp_v", 2, "train", "pp_v", "OUT"),
        leg("pp-clipped", 2, "train", "pp", "OUT", *CLIPPED),
        leg("pp-save", 2, "train", "pp", "OUT", "steps=3", "save=CKPT"),
        leg("tp_mismatch", 2, "refuse", "tp_mismatch", "OUT"),
        leg("tp_whole", 2, "refuse", "tp_whole", "OUT"),
        leg("pp_tp", 4, "train", "pp_tp", "OUT"),
        leg("pp4", 4, "train", "pp4", "OUT"),
        leg("pp_fsdp", 4, "train", "pp_fsdp", "OUT"),
        leg("pp_tp_mismatch", 4, "refuse", "pp_tp_mismatch", "OUT"),
        leg("pp_v_fsdp", 4, "refuse", "pp_v_fsdp", "OUT"),
        leg("single", 1, "train", "single", "OUT"),
        leg("single-clipped", 1, "train", "single", "OUT", *CLIPPED),
        leg("single-resumed", 1, "train", "single", "OUT", "resume=CKPT"),
    ]


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Batches:
    root = tmp_path_factory.mktemp("tied")
    return Batches(PROGRAM, root, plan(root), leg_timeout=240, cwd=HERE, forked=True, fork_workers=True)


def result(legs: Batches, name: str) -> dict:
    legs(name)
    return torch.load(legs.root / f"{name}.pt")


def assert_trained_like(got: dict, expected: dict) -> None:
    assert got["steps"] == expected["steps"]
    assert got["state_dict"].keys() == expected["state_dict"].keys()
    for key, value in expected["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][key], value, rtol=0, atol=ATOL, msg=key)


def assert_still_tied(got: dict) -> None:
    """Both names hold the same values, in the gathered state and on every rank holding them."""
    assert torch.equal(got["state_dict"][TIED[0]], got["state_dict"][TIED[1]])
    copies = [value for held in got["copies"] for value in held.values()]
    assert copies and all(torch.equal(copy, copies[0]) for copy in copies)
    assert all(got["same_object"]), "a rank holding both names holds two parameters"


def test_tied_parameters_are_found_by_every_name():
    from trainmesh.strategies.tied import tied_parameters

    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.Linear(4, 5, bias=False))
    model[2].weight = model[0].weight
    assert tied_parameters(model) == [("0.weight", "2.weight")]
    assert tied_parameters(nn.Linear(2, 2)) == []


def test_tensor_parallel_keeps_one_tied_parameter(legs):
    got = result(legs, "tp")
    assert_still_tied(got)
    assert all(got["same_object"]) and all(len(held) == 2 for held in got["copies"])
    assert_trained_like(got, result(legs, "single"))


@pytest.mark.parametrize("layout", ["tp_user", "tp_user_meta"])
def test_a_tie_split_by_the_models_own_parallelize_module_is_one_parameter_again(legs, layout):
    # configure_model(mesh) applies parallelize_module itself (tensor_parallel_plan() None): each
    # name got its own DTensor there. tp_user: tied in __init__; tp_user_meta: tied inside
    # configure_model on the meta device, then split. Left split they differ from one process
    # by 9e-3 (tp_user) and 0.2 (tp_user_meta) after these 5 steps.
    got = result(legs, layout)
    assert_still_tied(got)
    assert all(len(held) == 2 for held in got["copies"])
    assert_trained_like(got, result(legs, "single"))


def test_ties_are_recorded_as_registered_and_a_deliberate_untie_is_left_alone():
    from trainmesh.strategies.tied import TieRecorder

    recorder = TieRecorder()
    with recorder.recording("cpu"):
        model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.Linear(4, 5, bias=False))
        model[2].weight = model[0].weight
    assert recorder.ties(model) == [("0.weight", "2.weight")]  # still one object: found once
    with recorder.recording("cpu"):
        model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
        model[1].weight = model[0].weight
        model[1].weight = nn.Parameter(model[0].weight.detach().clone())  # the model unties it itself
    assert recorder.ties(model) == []  # two plain parameters: not a tie torch's split left behind
    # A weight made before recording and replaced while recording is not kept alive by it.
    before = weakref.ref(model[0].weight)
    with recorder.recording("cpu"):
        model[0].weight = nn.Parameter(torch.zeros(5, 4))
    assert before() is None


@pytest.mark.parametrize("layout", ["pp", "pp_tp", "pp_fsdp", "pp_v"])
def test_pipeline_stages_keep_their_copies_equal_and_train_like_one_process(legs, layout):
    # pp, pp_tp, pp_fsdp: the embedding on the first stage's ranks, the head on the last's;
    # pp_v (ZBVZeroBubble): both on rank 0 (stages 0 and 3), one object there.
    got = result(legs, layout)
    assert_still_tied(got)
    held = [sorted(names) for names in got["copies"]]
    if layout == "pp_v":
        assert held == [sorted(TIED), []]
    else:
        assert sorted(map(tuple, held)) == sorted([(TIED[0],), (TIED[1],)] * (len(held) // 2))
    assert_trained_like(got, result(legs, "single"))


def test_four_pipeline_stages_sum_the_tied_copies_over_the_middle_stages_too(legs):
    got = result(legs, "pp4")
    assert_still_tied(got)
    held = [sorted(names) for names in got["copies"]]
    assert held == [[TIED[0]], [], [], [TIED[1]]]  # the embedding first, the head last, none between
    assert_trained_like(got, result(legs, "single"))


def test_clipping_counts_the_tied_gradient_once_and_accumulates_it_once(legs):
    got = result(legs, "pp-clipped")
    assert_still_tied(got)
    assert_trained_like(got, result(legs, "single-clipped"))


def test_a_pipelined_checkpoint_loads_into_one_process_tied_and_resumes_like_one_run(legs):
    # The pipeline ran 3 steps and wrote a distributed checkpoint (each stage its copy, under
    # its own name); one process resumes it for the epoch's last 2 steps.
    resumed = result(legs, "single-resumed")
    assert resumed["same_object"] == [True]
    assert_still_tied(resumed)
    assert_trained_like(resumed, result(legs, "single"))


@pytest.mark.parametrize(
    ("name", "words"),
    [
        (
            "tp_mismatch",
            [
                "tok_embeddings.weight and output.weight",
                "(Shard(dim=0),)",
                "(Shard(dim=1),)",
                "tensor-parallel plan",
                "same placement",
                "untie",
            ],
        ),
        (
            "tp_whole",
            [
                "tok_embeddings.weight and output.weight",
                "(Shard(dim=0),)",
                "output.weight: whole (not split)",
                "same placement",
            ],
        ),
        (
            "tp_user_mismatch",
            [
                "tok_embeddings.weight and output.weight",
                "(Shard(dim=0),)",
                "(Shard(dim=1),)",
                "the parallelize_module plan configure_model(mesh) applies",
                "same placement",
                "untie",
            ],
        ),
        (
            "tp_user_whole",
            [
                "tok_embeddings.weight and output.weight",
                "(Shard(dim=0),)",
                "output.weight: whole (not split)",
                "the parallelize_module plan configure_model(mesh) applies",
            ],
        ),
        (
            "pp_tp_mismatch",
            [
                "tok_embeddings.weight and output.weight",
                "pipeline stages' tensor parallelism",
                "(Shard(dim=1),)",
                "same placement",
            ],
        ),
        (
            "pp_v_fsdp",
            ["tok_embeddings.weight and output.weight", "stages [0, 3]", "one rank", "1F1B", "dp_shard=1", "untie"],
        ),
    ],
)
def test_a_tie_that_cannot_be_kept_is_refused_before_training(legs, name, words):
    message = result(legs, name)["message"]
    missing = [word for word in words if word not in message]
    assert not missing, f"{missing} not in: {message}"


def test_a_meta_build_tied_over_more_than_two_stages_with_sharding_data_parallelism_is_refused(monkeypatch):
    # StageCopies.build on pipeline rank 0 of 3 (embedding first, nothing in the middle, head
    # last), fed the views the 3 pp ranks would gather: on the meta device (equalize=False) and
    # with dp sharding, the middle rank could not know the shard's shape it must pass along.
    from types import SimpleNamespace

    from trainmesh.strategies import collectives
    from trainmesh.strategies.tied import StageCopies

    ties = [("emb.weight", "out.weight")]
    parts = [["emb"], ["mid"], ["out"]]
    with torch.device("meta"):
        stages = [nn.Module() for _ in parts]
        stages[0].emb, stages[1].mid, stages[2].out = nn.Embedding(5, 4), nn.Linear(4, 4), nn.Linear(4, 5, bias=False)
    mesh = SimpleNamespace(group=lambda axis: None)

    seen: dict[int, list] = {}  # each rank's own view, as it would send it

    def build(rank: int, gathered: list | None, *, sharded: bool = True) -> StageCopies:
        def gather(_mesh, view, over):
            seen[rank] = view
            return gathered or [view]

        monkeypatch.setattr(collectives, "all_gather_object", gather)
        return StageCopies.build(
            stages[rank],
            ties,
            stage_parts={rank: parts[rank]},
            sharded_by_data_parallel=sharded,
            pp_rank=rank,
            mesh=mesh,
            device=torch.device("cpu"),
            equalize=False,
        )

    for rank in range(3):
        build(rank, None)  # alone: this rank's view only
    views = [seen[rank] for rank in range(3)]
    with pytest.raises(ValueError, match=r"emb\.weight, out\.weight.*meta device.*more than 2 pipeline stages") as err:
        build(0, views)
    assert all(words in str(err.value) for words in ("build the model eagerly", "2 pipeline stages", "untie"))
    # The same tie over 2 stages, or without sharding, is kept as two copies summed over pp.
    assert [copy.holders for copy in build(0, [views[0], views[2]]).copies] == [(0, 1)]
    assert [copy.holders for copy in build(0, views, sharded=False).copies] == [(0, 2)]
