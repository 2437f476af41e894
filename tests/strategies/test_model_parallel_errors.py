"""Model parallelism's refusals, in one process and without any process group: each bad input
(a split point, a mesh, a tensor-parallel plan, a schedule, a loader, a step hook that does not
call the model once, a forward that runs its parts out of order) stops with an error that says
what is wrong, why, and what to do. Also the pipeline's cutting helpers and the mesh layout
with ``order=``, checked directly."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.precision import Precision
from trainmesh.strategies.mesh import AXES, ParallelDims, ParallelMesh
from trainmesh.strategies.model_parallel import PP_WITHIN_NODE_ORDER, ModelParallelStrategy
from trainmesh.strategies.model_parallel_support import _defines_configure_ddp
from trainmesh.strategies.pipeline import (
    PartOrderCheck,
    check_pipeline_loader,
    check_stage_kwargs,
    choose_schedule,
    stage_indices,
)
from trainmesh.strategies.pipeline_cut import _balanced_cuts, keep_only, pipeline_parts, split_parts, stage_view
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.stage_calls import replaying
from trainmesh.strategies.tensor_parallel import check_tensor_parallel_plan, tensor_parallel_plan

D = 8


class Block(nn.Module):
    def __init__(self, width: int = D, hidden: int = 2 * D) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class Net(tm.Module):
    """embed, 4 blocks in a ModuleList, head: 6 parts; forward skips what another stage holds."""

    def __init__(self, blocks: int = 4, hidden: int = 2 * D, vocab: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, D)
        self.layers = nn.ModuleList([Block(hidden=hidden) for _ in range(blocks)])
        self.head = nn.Linear(D, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers:
            h = layer(h)
        return self.head(h) if self.head is not None else h


class SequentialNet(tm.Module):
    """Linear layers in an nn.Sequential, between two plain children."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, D)
        self.layers = nn.Sequential(*[nn.Linear(D, D) for _ in range(4)])
        self.out = nn.Linear(D, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) if self.inp is not None else x
        h = self.layers(h)
        return self.out(h) if self.out is not None else h


def _raises(kind: type[Exception], call, *words: str) -> str:
    """Run ``call``; it must raise ``kind`` whose message holds every one of ``words``."""
    with pytest.raises(kind) as caught:
        call()
    message = str(caught.value)
    missing = [word for word in words if word not in message]
    assert not missing, f"{missing} not in: {message}"
    return message


def _one_rank_of(strategy: ModelParallelStrategy, rank: int, **sizes: int) -> ModelParallelStrategy:
    """``strategy`` seeing the mesh of ``sizes`` as rank ``rank`` (no process group: only the
    code before anything distributed can run)."""
    dims = ParallelDims(**{"dp_shard": 1, **sizes}, order=strategy.order)
    strategy._mesh = ParallelMesh(
        dims.resolved(dims.pp * dims.tp * dims.dp_replicate * dims.dp_shard), global_rank=rank
    )
    return strategy


# ---- split points ---------------------------------------------------------------------------


def test_a_split_point_naming_no_part_says_which_and_lists_the_parts():
    message = _raises(
        ValueError,
        lambda: split_parts(Net(), 2, ["layers.7"]),
        "['layers.7']",
        "name no part of Net",
        "top-level child or a member of a top-level container",
    )
    assert "embed, layers.0, layers.1, layers.2, layers.3, head" in message


def test_a_split_point_inside_a_part_is_not_a_part_and_a_container_cuts_before_its_first_member():
    _raises(ValueError, lambda: split_parts(Net(), 2, ["layers.1.up"]), "['layers.1.up']", "name no part")
    assert split_parts(Net(), 2, ["layers"]) == split_parts(Net(), 2, ["layers.0"])


@pytest.mark.parametrize(
    "points",
    [["layers.3", "layers.1"], ["layers.1", "layers.1"], ["embed", "layers.2"]],
    ids=["out_of_order", "repeated", "first_part"],
)
def test_split_points_out_of_order_repeated_or_at_the_first_part_are_refused(points):
    _raises(
        ValueError,
        lambda: split_parts(Net(), 3, points),
        f"split points {points}",
        "in the model's order, distinct, and not its first part 'embed'",
    )


@pytest.mark.parametrize("points", [["layers.2"], ["layers.1", "layers.2", "layers.3"]])
def test_a_wrong_number_of_split_points_says_how_many_are_needed(points):
    _raises(
        ValueError,
        lambda: split_parts(Net(), 3, points),
        "3 pipeline stages need 2 split points",
        f"got {len(points)}: {points}",
    )


def test_split_points_cut_before_each_named_part():
    assert split_parts(Net(), 3, ["layers.1", "layers.3"]) == [
        ["embed", "layers.0"],
        ["layers.1", "layers.2"],
        ["layers.3", "head"],
    ]


def test_more_stages_than_parts_says_how_many_parts_there_are():
    _raises(
        ValueError,
        lambda: split_parts(Net(blocks=1), 4, None),
        "Net has 3 parts (embed, layers.0, head)",
        "needs 4 stages",
        "use fewer stages (pp x stages_per_rank)",
    )


def test_parameters_held_by_the_model_itself_cannot_be_given_to_a_stage():
    model = Net()
    model.scale = nn.Parameter(torch.ones(1))
    _raises(
        ValueError, lambda: pipeline_parts(model), "Net holds parameters directly (scale)", "put them in a submodule"
    )


# ---- the mesh -------------------------------------------------------------------------------


def test_more_pipeline_stages_than_processes_is_refused_before_any_mesh():
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=4).dims(2),
        "pp=4 pipeline stages need at least 4 processes",
        "the run has 2",
        "use pp <= devices x nodes",
    )


def test_model_parallel_dims_fill_the_rest_and_keep_the_order():
    dims = ModelParallelStrategy(pp=2, tp=2).dims(8)
    assert (dims.pp, dims.tp, dims.dp_shard, dims.dp_replicate, dims.order) == (2, 2, 2, 1, AXES)
    within = ModelParallelStrategy(pp=2, dp_shard=1, dp_replicate=-1, pp_within_node=True).dims(4)
    assert (within.pp, within.dp_replicate, within.order) == (2, 2, PP_WITHIN_NODE_ORDER)


def test_a_mesh_whose_sizes_do_not_multiply_to_the_world_says_how_many_it_needs():
    _raises(
        ValueError,
        lambda: ParallelDims(pp=2, tp=2, dp_shard=1).resolved(8),
        "pp=2 x tp=2 needs 4 processes, but the run has 8",
        "multiply to the number of processes",
    )
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=2, tp=3).dims(8),
        "8 processes cannot be divided into",
        "3",
        "does not divide 8",
    )


def test_two_rest_axes_are_refused_by_name():
    _raises(
        ValueError,
        lambda: ParallelDims(pp=-1, tp=-1, dp_shard=1).resolved(4),
        "only one mesh axis may be -1",
        "['pp', 'tp']",
    )
    # dp_shard is -1 by default: a second -1 elsewhere is two.
    _raises(
        ValueError, lambda: ModelParallelStrategy(tp=-1).dims(4), "only one mesh axis may be -1", "'tp'", "'dp_shard'"
    )


def test_a_mesh_order_must_name_every_axis_once():
    _raises(ValueError, lambda: ParallelDims(order=("pp", "dp_shard", "tp")).resolved(1), "must name each of")
    _raises(ValueError, lambda: ParallelDims(order=("pp", "pp", "dp_shard", "tp")).resolved(1), "must name each of")


@pytest.mark.parametrize("order", [AXES, PP_WITHIN_NODE_ORDER])
def test_coordinates_follow_the_order_and_global_rank_with_round_trips(order):
    dims = ParallelDims(dp_replicate=2, dp_shard=2, pp=2, tp=2, order=order).resolved(16)
    assert dims.order == order
    sizes = [getattr(dims, axis) for axis in order]
    seen = set()
    for rank in range(16):
        mesh = ParallelMesh(dims, global_rank=rank)
        # Row-major over the order: the last axis of the order varies fastest.
        rest, expected = rank, {}
        for axis, size in reversed(list(zip(order, sizes))):
            expected[axis], rest = rest % size, rest // size
        assert mesh.coordinates == expected
        assert mesh.global_rank_with() == rank
        seen.add(tuple(mesh.rank(axis) for axis in AXES))
        for axis in AXES:
            for value in range(getattr(dims, axis)):
                other = ParallelMesh(dims, global_rank=mesh.global_rank_with(**{axis: value}))
                assert other.rank(axis) == value
                assert all(other.rank(a) == mesh.rank(a) for a in AXES if a != axis)
    assert len(seen) == 16


def test_pp_within_node_puts_a_pipeline_on_neighbouring_ranks():
    dims = ParallelDims(dp_replicate=2, dp_shard=1, pp=2, tp=2, order=PP_WITHIN_NODE_ORDER).resolved(8)
    mesh = ParallelMesh(dims, global_rank=0)
    assert [mesh.global_rank_with(pp=s) for s in range(2)] == [0, 2]  # one node of 4: ranks 0-3
    assert [mesh.global_rank_with(dp_replicate=r) for r in range(2)] == [0, 4]  # replicas across nodes
    assert ParallelMesh(dims, global_rank=5).coordinates == {"tp": 1, "pp": 0, "dp_shard": 0, "dp_replicate": 1}
    default = ParallelMesh(ParallelDims(dp_replicate=2, dp_shard=1, pp=2, tp=2).resolved(8), global_rank=0)
    assert [default.global_rank_with(pp=s) for s in range(2)] == [0, 4]  # stages furthest apart


# ---- tensor-parallel plans ------------------------------------------------------------------


def test_a_plan_naming_a_missing_module_lists_the_submodules():
    _raises(
        ValueError,
        lambda: check_tensor_parallel_plan(Net(), {"layers.0.gate": ColwiseParallel()}, 2),
        "'layers.0.gate'",
        "Net has no such submodule",
        "embed",
        "layers.0.up",
        "fnmatch patterns",
    )


@pytest.mark.parametrize(
    ("name", "style", "what", "size"),
    [
        ("layers.0.up", ColwiseParallel(), "out_features", 2 * D + 2),
        ("layers.0.down", RowwiseParallel(), "in_features", 2 * D + 2),
    ],
)
def test_a_linear_split_the_tp_size_does_not_divide_is_named(name, style, what, size):
    model = Net(hidden=size)  # 18: divisible by 2 and 3, not by 4
    check_tensor_parallel_plan(model, {name: style}, 2)
    _raises(
        ValueError,
        lambda: check_tensor_parallel_plan(model, {name: style}, 4),
        f"splits {name} (Linear) along its {what} of {size}",
        "4 tensor-parallel ranks cannot divide",
        "Choose a tp size that divides",
        f"leave {name!r} out of the plan",
    )


def test_a_linear_is_checked_along_the_dimension_its_style_splits():
    model = Net()
    model.head = nn.Linear(D, 3)  # in 8, out 3
    check_tensor_parallel_plan(model, {"head": RowwiseParallel()}, 4)  # in_features 8
    _raises(ValueError, lambda: check_tensor_parallel_plan(model, {"head": ColwiseParallel()}, 4), "out_features of 3")


@pytest.mark.parametrize(
    ("style", "what", "size"), [(ColwiseParallel(), "embedding_dim", D), (RowwiseParallel(), "num_embeddings", 10)]
)
def test_an_embedding_split_the_tp_size_does_not_divide_is_named(style, what, size):
    model = Net(vocab=10)  # 10 rows of 8
    check_tensor_parallel_plan(model, {"embed": style}, 2)
    tp = 3
    _raises(
        ValueError,
        lambda: check_tensor_parallel_plan(model, {"embed": style}, tp),
        f"splits embed (Embedding) along its {what} of {size}",
        f"{tp} tensor-parallel ranks cannot divide",
    )


def test_fnmatch_patterns_match_every_block_and_check_each():
    model = Net(hidden=2 * D)
    plan = {"layers.*.up": ColwiseParallel(), "layers.*.down": RowwiseParallel(), "layers.[0-1].up": ColwiseParallel()}
    check_tensor_parallel_plan(model, plan, 4)
    model.layers[2].up = nn.Linear(D, 6)  # one block's up no longer divisible by 4
    _raises(ValueError, lambda: check_tensor_parallel_plan(model, plan, 4), "splits layers.2.up (Linear)", "of 6")
    _raises(
        ValueError,
        lambda: check_tensor_parallel_plan(model, {"blocks.*.up": ColwiseParallel()}, 4),
        "'blocks.*.up'",
        "no such submodule",
    )


def test_styles_that_split_no_weight_are_not_size_checked():
    model = Net()
    model.norm = nn.LayerNorm(5)
    check_tensor_parallel_plan(model, {"norm": SequenceParallel()}, 4)


def test_a_plan_that_is_not_a_dict_names_the_type_returned():
    class ListPlan(Net):
        def tensor_parallel_plan(self):
            return [("layers.0.up", ColwiseParallel())]

    _raises(
        TypeError,
        lambda: tensor_parallel_plan(ListPlan()),
        "ListPlan.tensor_parallel_plan() returned list",
        "return a dict",
        "or None",
    )
    assert tensor_parallel_plan(Net()) is None
    assert tensor_parallel_plan(nn.Linear(2, 2)) is None  # a plain nn.Module states none


def test_tp_without_a_plan_is_refused_at_setup():
    strategy = _one_rank_of(ModelParallelStrategy(tp=2, dp_shard=1), 0, tp=2)
    _raises(
        ValueError,
        lambda: strategy.setup_module(Net()),
        "tp=2 but Net states no tensor_parallel_plan()",
        "return {module name: ColwiseParallel()",
    )


def test_a_bad_plan_is_refused_at_setup_before_anything_is_split():
    class BadPlan(Net):
        def tensor_parallel_plan(self):
            return {"layers.*.up": ColwiseParallel()}

    strategy = _one_rank_of(ModelParallelStrategy(tp=3, dp_shard=1), 0, tp=3)
    model = BadPlan()
    _raises(ValueError, lambda: strategy.setup_module(model), "splits layers.0.up", "3 tensor-parallel ranks")
    assert type(model.layers[0].up.weight) is nn.Parameter


# ---- data parallelism, precision, schedules ------------------------------------------------------


def test_ddp_is_refused_and_fsdp2_named_instead():
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=2, data_parallel="ddp"),
        "data_parallel='ddp'",
        "does not compose with pipeline or tensor parallelism",
        "FSDP2 instead",
        "Leave data_parallel='fsdp'",
    )
    _raises(ValueError, lambda: ModelParallelStrategy(data_parallel="zero"), "'zero' is not known", "'fsdp'")


def test_a_module_defining_configure_ddp_is_refused_at_setup():
    class WithDDP(Net):
        def configure_ddp(self, model, device_ids):
            return model

    class Inherits(WithDDP):
        pass

    strategy = ModelParallelStrategy()  # a one-process mesh: the check comes first
    for cls in (WithDDP, Inherits):
        _raises(
            ValueError,
            lambda: strategy.setup_module(cls()),  # noqa: B023
            f"{cls.__name__} defines configure_ddp",
            "does not compose",
            "remove configure_ddp for model-parallel runs",
        )
    assert _defines_configure_ddp(Inherits()) and not _defines_configure_ddp(Net())
    assert not _defines_configure_ddp(nn.Linear(2, 2))


def test_fp16_mixed_precision_is_refused_and_bf16_suggested():
    fp16 = Placement(precision=Precision("16-mixed", device_type="cpu"))
    words = ("precision='16-mixed'", "GradScaler", "overflow on the other ranks", "precision='bf16-mixed'")
    _raises(ValueError, lambda: ModelParallelStrategy(pp=2, placement=fp16), *words)
    _raises(ValueError, lambda: ModelParallelStrategy(pp=2).with_placement(fp16), *words)  # the Trainer's placement
    ModelParallelStrategy(pp=2).with_placement(Placement(precision=Precision("bf16-mixed", device_type="cpu")))


@pytest.mark.parametrize("microbatches", [0, -2, 1.5])
def test_microbatches_must_be_a_positive_count(microbatches):
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=2, microbatches=microbatches),
        f"microbatches={microbatches!r}",
        "positive number",
    )


def test_an_unknown_schedule_lists_the_known_ones():
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=2, schedule="zigzag"),
        "pipeline schedule 'zigzag' is not known",
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "ZBVZeroBubble",
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("GPipe", ("ScheduleGPipe", 1)),
        ("1F1B", ("Schedule1F1B", 1)),
        ("Interleaved1F1B", ("ScheduleInterleaved1F1B", 2)),
        ("interleaved_zero_bubble", ("ScheduleInterleavedZeroBubble", 2)),
        ("ZBV-ZeroBubble", ("ScheduleZBVZeroBubble", 2)),
        ("DualPipeV", ("ScheduleDualPipeV", 2)),
    ],
)
def test_schedule_names_ignore_case_dashes_and_underscores(name, expected):
    choice = choose_schedule(name, None)
    assert (choice.class_name, choice.stages_per_rank) == expected


@pytest.mark.parametrize(
    ("name", "per_rank", "words"),
    [
        ("1F1B", 2, ("runs one stage per rank", "stages_per_rank=2 needs an interleaved schedule")),
        ("GPipe", 3, ("runs one stage per rank", "Interleaved1F1B")),
        ("Interleaved1F1B", 1, ("interleaves several stages per rank", "stages_per_rank of 2 or more")),
        ("LoopedBFS", 0, ("stages_per_rank of 2 or more",)),
        ("ZBVZeroBubble", 3, ("exactly 2 stages on each rank (a V)", "stages_per_rank=3")),
        ("DualPipeV", 4, ("exactly 2 stages on each rank",)),
    ],
)
def test_stages_per_rank_inconsistent_with_the_schedule_is_refused(name, per_rank, words):
    _raises(
        ValueError,
        lambda: ModelParallelStrategy(pp=2, schedule=name, stages_per_rank=per_rank),
        f"schedule {name!r}",
        *words,
    )


def test_stage_indices_are_looped_or_v_shaped():
    looped = choose_schedule("Interleaved1F1B", 3)
    assert [stage_indices(r, 2, looped) for r in range(2)] == [[0, 2, 4], [1, 3, 5]]
    assert [stage_indices(r, 4, choose_schedule("1F1B", None)) for r in range(4)] == [[0], [1], [2], [3]]
    v = choose_schedule("ZBVZeroBubble", None)
    assert [stage_indices(r, 3, v) for r in range(3)] == [[0, 5], [1, 4], [2, 3]]
    # Every stage on exactly one rank.
    for choice, pp in ((looped, 2), (v, 3), (choose_schedule("LoopedBFS", 2), 4)):
        held = sorted(s for r in range(pp) for s in stage_indices(r, pp, choice))
        assert held == list(range(pp * choice.stages_per_rank))


# ---- loaders --------------------------------------------------------------------------------


def _loader(samples: int, batch_size: int, drop_last: bool = False) -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(samples, 2)), batch_size=batch_size, drop_last=drop_last)


def test_a_training_batch_the_microbatches_do_not_divide_is_refused():
    _raises(
        ValueError,
        lambda: check_pipeline_loader(
            _loader(12, 6), train=True, microbatches=4, schedule=choose_schedule("1F1B", None)
        ),
        "training batch size 6 cannot be cut into 4 equal pipeline micro-batches",
        "batch size divisible by 4",
        "microbatches= that divides 6",
    )


def test_a_partial_last_batch_the_microbatches_do_not_divide_is_refused_unless_dropped():
    one_f_one_b = choose_schedule("1F1B", None)
    _raises(
        ValueError,
        lambda: check_pipeline_loader(_loader(11, 4), train=True, microbatches=2, schedule=one_f_one_b),
        "partial batch of 3 samples",
        "11 samples per data-parallel rank, batches of 4",
        "drop_last=True",
    )
    check_pipeline_loader(_loader(11, 4, drop_last=True), train=True, microbatches=2, schedule=one_f_one_b)
    check_pipeline_loader(_loader(10, 4), train=True, microbatches=2, schedule=one_f_one_b)  # last batch of 2: fine
    check_pipeline_loader(_loader(12, 4), train=True, microbatches=4, schedule=one_f_one_b)


def test_evaluation_batches_of_any_size_are_accepted():
    check_pipeline_loader(_loader(11, 5), train=False, microbatches=4, schedule=choose_schedule("1F1B", None))
    check_pipeline_loader(
        _loader(11, 5), train=False, microbatches=4, schedule=choose_schedule("Interleaved1F1B", None)
    )


@pytest.mark.parametrize("name", ["ZBVZeroBubble", "DualPipeV"])
def test_a_v_shaped_schedule_refuses_evaluation_loaders(name):
    schedule = choose_schedule(name, None)
    _raises(
        ValueError,
        lambda: check_pipeline_loader(_loader(8, 4), train=False, microbatches=2, schedule=schedule),
        "cannot run forward only",
        "validation, test and predict cannot run under it",
        "Use Interleaved1F1B or InterleavedZeroBubble",
    )
    check_pipeline_loader(_loader(8, 4), train=True, microbatches=2, schedule=schedule)


def test_a_batch_sampler_of_the_users_is_left_to_the_step():
    loader = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_sampler=[[0, 1, 2], [3, 4, 5, 6]])
    check_pipeline_loader(loader, train=True, microbatches=2, schedule=choose_schedule("1F1B", None))


# ---- the last stage's step hooks: self(...) answered by the pipeline ------------------------------


def test_a_hook_that_never_calls_the_model_is_refused():
    model, x = Net(), torch.zeros(2, dtype=torch.long)
    with pytest.raises(RuntimeError) as caught:
        with replaying(model, "output", x, "training_step"):
            pass  # e.g. a loss computed from self.layers directly
    message = str(caught.value)
    assert "training_step never called self(...)" in message
    assert "the pipeline runs" in message and "call self(pipeline_input(batch)) once" in message


def test_a_hook_that_calls_the_model_twice_is_refused():
    model, x = Net(), torch.zeros(2, dtype=torch.long)
    with replaying(model, "output", x, "validation_step"):
        assert model(x) == "output"
        _raises(
            RuntimeError,
            lambda: model(x),
            "validation_step called self(...) twice",
            "runs once per batch",
            "Call it once, on pipeline_input(batch)",
        )


@pytest.mark.parametrize(
    "call",
    [
        lambda model, x: model(x + 1),  # transformed outside forward
        lambda model, x: model(x[:1]),  # other rows
        lambda model, x: model(x.float()),  # another dtype
        lambda model, x: model("text"),
    ],
    ids=["transformed", "rows", "dtype", "not_a_tensor"],
)
def test_a_hook_that_calls_the_model_on_another_input_is_refused(call):
    model, x = Net(), torch.arange(4)
    with pytest.raises(ValueError) as caught:
        with replaying(model, "output", x, "training_step"):
            call(model, x)
    message = str(caught.value)
    assert "training_step called self(...) on something other than pipeline_input(batch)" in message
    assert "Do the transformation inside forward, or override pipeline_input(batch)" in message


def test_a_hook_passing_keyword_inputs_other_than_pipeline_kwargs_is_refused():
    model, x = Net(), torch.arange(4)
    with pytest.raises(ValueError, match=r"keyword inputs \['extra'\] other than pipeline_kwargs\(batch\) \(\[\]\)"):
        with replaying(model, "output", x, "training_step"):
            model(x, extra=torch.ones(4))
    with replaying(model, "output", x, "training_step", {"mask": torch.ones(4)}) as replay:
        assert model(x, mask=torch.ones(4)) == "output"  # the declared keyword inputs: answered
    assert replay.calls == 1


def test_pipeline_kwargs_must_be_per_sample_tensors_torch_can_cut():
    assert tm.Module().pipeline_kwargs((torch.ones(2), torch.ones(2))) == {}
    _raises(
        ValueError,
        lambda: check_stage_kwargs({"mask": torch.ones(16, 16)}, 8),
        "pipeline_kwargs(batch)['mask'] is (16, 16), not a tensor with one row per sample (8)",
        "cuts every keyword input into micro-batches along its first dimension",
        "expand a mask",
    )
    _raises(ValueError, lambda: check_stage_kwargs({"causal": True}, 8), "['causal'] is bool")
    _raises(
        ValueError,
        lambda: check_stage_kwargs({"target": torch.ones(8)}, 8),
        "names 'target', which torch's schedule.step takes for itself",
    )
    _raises(TypeError, lambda: check_stage_kwargs([torch.ones(8)], 8), "returned list; return a dict")
    assert check_stage_kwargs({"positions": torch.ones(8, 3)}, 8).keys() == {"positions"}


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, D)
        self.layers = nn.ModuleList([Block() for _ in range(4)])


class Wrapped(tm.Module):
    """Blocks one level down (``self.model.layers``), as Hugging Face models hold them."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Inner()
        self.head = nn.Linear(D, 3)


def test_blocks_nested_one_level_down_are_named_with_how_to_expose_them():
    _raises(
        ValueError,
        lambda: split_parts(Wrapped(), 4, None),
        "Wrapped has 2 parts (model, head) but the pipeline needs 4 stages: its blocks are nested, "
        "model.layers (4 blocks) sits inside 'model'",
        "cuts only the model's top-level children",
        "attributes of Wrapped itself, e.g. self.layers = nn.ModuleDict(...)",
    )


def test_replay_answers_an_equal_input_once_and_forward_runs_again_after():
    model, x = Net(), torch.arange(4)
    with replaying(model, "output", x, "training_step") as replay:
        assert model(x.clone()) == "output"  # equal values, another tensor: the same input
    assert replay.calls == 1 and "_call_instead" not in model.__dict__
    assert model(x).shape == (4, 3)


def test_an_error_inside_the_hook_is_not_masked_by_the_replay_check():
    model = Net()
    with pytest.raises(KeyError, match="boom"):
        with replaying(model, "output", torch.arange(2), "training_step"):
            raise KeyError("boom")
    assert "_call_instead" not in model.__dict__


def test_pipeline_input_takes_the_first_element_and_refuses_a_dict_naming_the_override():
    model, x = Net(), torch.arange(3)
    assert model.pipeline_input(x) is x
    assert model.pipeline_input((x, torch.ones(3))) is x
    assert model.pipeline_input([x]) is x
    for batch in ({"x": x}, (), ("text", x)):
        _raises(
            TypeError,
            lambda: model.pipeline_input(batch),  # noqa: B023
            "Net.pipeline_input cannot tell the model's input",
            f"batch of type {type(batch).__name__}",
            "override pipeline_input(batch)",
        )


# ---- each stage runs its parts in their order ----------------------------------------------------


class Reordered(nn.Module):
    """Registers a, b, c; forward runs them as configured."""

    def __init__(self, runs: list[str]) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)
        self.runs = runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.runs:
            x = getattr(self, name)(x)
        return x


def _check_order(runs: list[str], parts: list[str], stage: int = 1) -> PartOrderCheck:
    model = Reordered(runs)
    check = PartOrderCheck(model, parts, stage)
    model(torch.ones(1, 2))
    return check


def test_a_stage_running_its_parts_in_their_order_passes_and_removes_its_hooks():
    model = Reordered(["a", "b", "b", "c"])  # a part run twice is fine
    check = PartOrderCheck(model, ["a", "b", "c"], 0)
    model(torch.ones(1, 2))
    check.verify()
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_a_stage_running_its_parts_in_another_order_is_named():
    check = _check_order(["a", "c", "b"], ["a", "b", "c"])
    message = _raises(
        RuntimeError,
        check.verify,
        "pipeline stage 1 holds the parts ['a', 'b', 'c']",
        "ran them in the order ['a', 'c', 'b']",
        "register the layers in the order forward uses them",
        "split_points",
    )
    assert "never ran" not in message


def test_a_stage_skipping_a_part_is_named():
    check = _check_order(["a", "c"], ["a", "b", "c"], stage=0)
    _raises(RuntimeError, check.verify, "pipeline stage 0 holds the parts ['a', 'b', 'c']", "never ran ['b']")


def test_part_order_is_checked_on_container_members():
    class Backwards(SequentialNet):
        def forward(self, x):
            h = self.inp(x)
            for layer in reversed(self.layers):
                h = layer(h)
            return self.out(h)

    model = Backwards()
    check = PartOrderCheck(model, ["inp", "layers.0", "layers.1", "layers.2", "layers.3", "out"], 0)
    model(torch.ones(2, 4))
    _raises(RuntimeError, check.verify, "in the order ['inp', 'layers.3', 'layers.2', 'layers.1', 'layers.0', 'out']")


# ---- cutting the model ----------------------------------------------------------------------


def test_parts_are_top_level_children_with_containers_member_by_member():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(2, 2)
            self.seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            self.blocks = nn.ModuleDict({"first": nn.Linear(2, 2), "second": nn.Linear(2, 2)})
            self.block = Block()  # not a container: one part
            self.out = nn.Linear(2, 2)

    assert pipeline_parts(Mixed()) == ["inp", "seq.0", "seq.1", "blocks.first", "blocks.second", "block", "out"]
    assert pipeline_parts(Net(blocks=2)) == ["embed", "layers.0", "layers.1", "head"]


@pytest.mark.parametrize(
    ("sizes", "stages", "cuts"),
    [
        ([10, 10, 10, 10], 2, [2]),
        ([10, 10, 10, 10], 4, [1, 2, 3]),
        ([30, 10, 10, 10], 2, [1]),
        ([1, 1, 1, 1, 100], 2, [4]),  # the one big part alone
        ([100, 1, 1, 1, 1], 3, [1, 2]),  # every stage non-empty even when unbalanced
        ([0, 0, 0], 3, [1, 2]),  # no parameters at all
    ],
)
def test_balanced_cuts_give_each_stage_about_its_share(sizes, stages, cuts):
    assert _balanced_cuts(sizes, stages) == cuts


def test_default_split_balances_parameter_counts():
    model = SequentialNet()  # inp 40, 4 x 72, out 18 parameters
    cut = split_parts(model, 2, None)
    assert cut == [["inp", "layers.0", "layers.1"], ["layers.2", "layers.3", "out"]]
    counts = [sum(p.numel() for name in parts for p in model.get_submodule(name).parameters()) for parts in cut]
    assert abs(counts[0] - counts[1]) <= 72


def test_keep_only_keeps_the_whole_models_parameter_names():
    model = Net()
    whole = dict(model.named_parameters())
    keep_only(model, {"layers.2", "layers.3", "head"})
    assert model.embed is None  # a dropped top-level child
    assert list(model.layers._modules) == ["2", "3"]  # members removed, names kept (not renumbered)
    kept = dict(model.named_parameters())
    assert "layers.3.up.weight" in kept and "layers.0.up.weight" not in kept and "embed.weight" not in kept
    assert all(kept[name] is whole[name] for name in kept)
    assert sorted(kept) == sorted(n for n in whole if n.startswith(("layers.2.", "layers.3.", "head.")))
    assert model(torch.ones(2, D)).shape == (2, 3)  # the stage's forward skips the dropped embed


def test_keep_only_on_a_sequential_keeps_layers_3_weight_and_the_stage_runs():
    model = SequentialNet()
    keep_only(model, {"layers.3", "out"})
    assert model.inp is None
    assert [n for n, _ in model.named_parameters()] == ["layers.3.weight", "layers.3.bias", "out.weight", "out.bias"]
    assert model(torch.ones(2, D)).shape == (2, 2)


def test_stage_view_shares_the_layers_and_leaves_the_module_whole():
    model = Net()
    first, second = (
        stage_view(model, {"embed", "layers.0", "layers.1"}),
        stage_view(model, {"layers.2", "layers.3", "head"}),
    )
    assert first.embed is model.embed and first.head is None and list(first.layers._modules) == ["0", "1"]
    assert second.embed is None and second.head is model.head and list(second.layers._modules) == ["2", "3"]
    assert second.layers._modules["2"] is model.layers[2]
    assert dict(second.named_parameters())["layers.3.up.weight"] is model.layers[3].up.weight
    # The module itself still holds everything.
    assert model.embed is not None and len(model.layers) == 4
    # A change to a shared layer shows in the view.
    with torch.no_grad():
        model.layers[2].up.weight.add_(1)
    assert torch.equal(second.layers._modules["2"].up.weight, model.layers[2].up.weight)
    x = torch.arange(3)
    assert torch.equal(second(first(x)), model(x))


def test_setup_module_keeps_only_this_ranks_stage():
    strategy = _one_rank_of(ModelParallelStrategy(pp=2, dp_shard=1, split_points=["layers.2"]), 1, pp=2)
    model = strategy.setup_module(Net())
    assert model.embed is None
    assert [n for n, _ in model.named_parameters()][:2] == ["layers.2.up.weight", "layers.2.up.bias"]
    pipeline = strategy._pipeline
    assert pipeline is not None and not pipeline.holds_first and pipeline.holds_last
    # This rank's stage holds stage 1's parts (the pipeline keeps every stage's cut).
    assert {i: pipeline.cut[i] for i in pipeline.stages} == {1: ["layers.2", "layers.3", "head"]}
    assert pipeline.microbatches == 2


def test_a_pipeline_stage_called_outside_its_schedule_is_refused():
    # A user's own loop calling model(x) on a stage would get the stage's activations as the output.
    strategy = _one_rank_of(ModelParallelStrategy(pp=2, dp_shard=1, split_points=["layers.2"]), 0, pp=2)
    model = strategy.setup_module(Net())
    tokens = torch.randint(0, 12, (2, 5))
    _raises(RuntimeError, lambda: model(tokens), "one stage of a pipeline", "runtime.train_step")
    from trainmesh.strategies.stage_calls import inside_schedule

    with inside_schedule(strategy._pipeline.stages.values()):  # what the schedule itself calls
        assert model(tokens).shape == (2, 5, D)  # stage 0's activations: embed, layers 0-1
    _raises(RuntimeError, lambda: model(tokens), "one stage of a pipeline")


def test_a_bad_split_point_is_refused_at_setup():
    strategy = _one_rank_of(ModelParallelStrategy(pp=2, dp_shard=1, split_points=["layers.9"]), 0, pp=2)
    _raises(ValueError, lambda: strategy.setup_module(Net()), "['layers.9'] name no part of Net")
    interleaved = _one_rank_of(ModelParallelStrategy(pp=2, dp_shard=1, schedule="Interleaved1F1B"), 0, pp=2)
    _raises(ValueError, lambda: interleaved.setup_module(Net(blocks=1)), "needs 4 stages")


# ---- problems a review found, fixed --------------------------------------------------------------


def test_a_tuple_pipeline_input_replays():
    model, x, mask = Net(), torch.arange(3), torch.ones(3)
    with replaying(model, "output", (x, mask), "training_step"):
        assert model(x, mask) == "output"


def test_a_pattern_parallelize_module_would_skip_is_refused():
    # torch's parallelize_module resolves "*.up" one dotted component at a time: only a direct
    # child's "up" (none here), so it would warn and split nothing; the check accepts it.
    with pytest.raises(ValueError, match="no such submodule"):
        check_tensor_parallel_plan(Net(), {"*.up": ColwiseParallel()}, 2)


def test_a_mesh_of_all_ones_describes_itself():
    with pytest.raises(ValueError) as caught:
        ParallelDims(dp_shard=1).resolved(2)
    assert "the mesh of one process (every size 1) needs 1 process," in str(caught.value)


def test_split_points_given_as_one_string_say_to_pass_a_list():
    _raises(TypeError, lambda: split_parts(Net(), 2, "layers.1"), "one string", "split_points=['layers.1']")


def test_stages_per_rank_that_is_not_a_number_is_named():
    _raises(
        TypeError,
        lambda: ModelParallelStrategy(pp=2, schedule="Interleaved1F1B", stages_per_rank="2"),
        "stages_per_rank='2'",
        "whole number",
    )


def test_two_rest_axes_because_of_dp_shards_default_say_how_to_fix_it():
    _raises(ValueError, lambda: ModelParallelStrategy(pp=-1).dims(4), "dp_shard is -1 unless given", "dp_shard=1")
