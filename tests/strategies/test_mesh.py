"""The one named mesh: ParallelDims sizes, ParallelMesh coordinates, and (4 gloo processes)
data sharding and reductions by the data-parallel rank and group."""

import json
import types

import pytest
from legs import HERE, run

from trainmesh.strategies.mesh import AXES, ParallelDims, ParallelMesh

# ---- ParallelDims.resolved ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "world", "expected"),
    [
        (ParallelDims(dp_replicate=2, dp_shard=-1), 8, ParallelDims(dp_replicate=2, dp_shard=4)),
        (ParallelDims(), 4, ParallelDims(dp_shard=4)),  # data parallelism alone: dp_shard takes everything
        (ParallelDims(dp_replicate=-1, dp_shard=2, tp=2), 8, ParallelDims(dp_replicate=2, dp_shard=2, tp=2)),
        (ParallelDims(dp_shard=1, tp=-1, pp=2), 6, ParallelDims(dp_shard=1, tp=3, pp=2)),
        (ParallelDims(dp_replicate=2, dp_shard=2, tp=2), 8, ParallelDims(dp_replicate=2, dp_shard=2, tp=2)),
        (ParallelDims(), 1, ParallelDims(dp_shard=1)),
    ],
)
def test_minus_one_takes_the_rest_of_the_processes(dims, world, expected):
    resolved = dims.resolved(world)
    assert resolved == expected
    assert resolved.world_size == world
    assert all(getattr(resolved, axis) >= 1 for axis in AXES)


def test_two_minus_ones_are_refused_by_name():
    with pytest.raises(ValueError, match=r"only one mesh axis may be -1.*\['dp_replicate', 'dp_shard'\]"):
        ParallelDims(dp_replicate=-1, dp_shard=-1).resolved(4)
    with pytest.raises(ValueError, match=r"\['dp_shard', 'tp'\]"):
        ParallelDims(tp=-1).resolved(4)  # dp_shard is -1 by default


def test_sizes_that_do_not_multiply_to_the_world_say_how_many_processes_are_needed():
    with pytest.raises(ValueError, match=r"dp_replicate=2 x dp_shard=2 needs 4 processes, but the run has 8"):
        ParallelDims(dp_replicate=2, dp_shard=2).resolved(8)
    with pytest.raises(ValueError, match=r"needs 8 processes, but the run has 4"):
        ParallelDims(dp_replicate=2, dp_shard=2, tp=2).resolved(4)


@pytest.mark.parametrize(
    ("dims", "world"),
    [
        (ParallelDims(dp_replicate=4, dp_shard=-1), 6),
        (ParallelDims(dp_shard=-1, tp=2), 3),
        (ParallelDims(dp_shard=-1, tp=2, pp=2), 2),  # fewer processes than the known sizes
    ],
)
def test_a_rest_that_is_not_a_whole_number_is_refused(dims, world):
    with pytest.raises(ValueError, match=rf"{world} processes cannot be divided into .*does not divide {world}"):
        dims.resolved(world)


@pytest.mark.parametrize("size", [0, -2, 1.5, "2"])
@pytest.mark.parametrize("axis", AXES)
def test_sizes_other_than_positive_integers_or_minus_one_are_refused(axis, size):
    sizes = {"dp_shard": 1, axis: size}
    with pytest.raises(ValueError, match=r"mesh sizes must be positive integers or -1 \(the rest\)"):
        ParallelDims(**sizes).resolved(4)


# ---- ParallelMesh coordinates (no process group) ------------------------------------------------


@pytest.mark.parametrize("rank", range(8))
def test_coordinates_are_row_major_over_pp_replicate_shard_tp(rank):
    dims = ParallelDims(dp_replicate=2, dp_shard=2, tp=2, pp=1).resolved(8)
    mesh = ParallelMesh(dims, global_rank=rank)
    assert mesh.rank("tp") == rank % 2
    assert mesh.rank("dp_shard") == (rank // 2) % 2
    assert mesh.rank("dp_replicate") == rank // 4
    assert mesh.rank("pp") == 0
    assert mesh.dp_rank == rank // 2  # the tp pair (2r, 2r+1) reads the same data
    assert mesh.dp_size == 4
    assert mesh.world_size == 8
    assert mesh.group_size("dp") == 4 and mesh.group_size("tp") == 2 and mesh.group_size("pp") == 1


@pytest.mark.parametrize("rank", range(8))
def test_pipeline_is_the_outermost_axis(rank):
    mesh = ParallelMesh(ParallelDims(dp_shard=2, tp=2, pp=2).resolved(8), global_rank=rank)
    assert (mesh.rank("pp"), mesh.rank("dp_shard"), mesh.rank("tp")) == (rank // 4, (rank // 2) % 2, rank % 2)
    assert mesh.dp_rank == (rank // 2) % 2 and mesh.dp_size == 2


def test_data_parallelism_alone_has_the_global_rank_as_data_parallel_rank():
    dims = ParallelDims().resolved(8)
    assert [ParallelMesh(dims, global_rank=r).dp_rank for r in range(8)] == list(range(8))
    one = ParallelMesh(ParallelDims().resolved(1))
    assert (one.dp_rank, one.dp_size, one.group("dp"), one.submesh("dp_shard")) == (0, 1, None, None)


def test_an_unknown_axis_is_refused_by_name():
    mesh = ParallelMesh(ParallelDims(dp_replicate=2, dp_shard=2, tp=2).resolved(8), global_rank=3)
    for ask in (mesh.rank, mesh.group_size, mesh.group):
        with pytest.raises(ValueError, match=r"mesh axis 'cp' is not known; the axes are \('pp', 'dp_replicate'"):
            ask("cp")
    with pytest.raises(ValueError, match=r"mesh axis 'dp' is not known"):
        mesh.rank("dp")  # "dp" names a group (replicate x shard), not one coordinate


# ---- 4 gloo processes -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """What each of 4 processes saw: one hsdp Runtime (2 x 2), and in its process group a tp=2 x
    dp_replicate=2 mesh and a dp_replicate=2 x dp_shard=2 one. The 4 processes are forks in one
    process group (helpers/forked.py's world=4, which the Runtime finds started): what is checked
    is the meshes', groups' and loaders' arithmetic, not how processes start (10 CPU-s less)."""
    out = tmp_path_factory.mktemp("mesh")
    result = run(str(HERE / "mesh_run.py"), str(out), timeout=180, forked=True, world=4)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    assert [s["global_rank"] for s in seen] == [0, 1, 2, 3] and {s["world_size"] for s in seen} == {4}
    return seen


def test_tp_by_dp_mesh_coordinates_match_the_device_mesh(four_ranks):
    for r, seen in enumerate(four_ranks):
        mesh = seen["tp_mesh"]
        assert mesh["dim_names"] == ["dp_replicate", "tp"] and mesh["layout"] == [[0, 1], [2, 3]]
        assert (mesh["dp_rank"], mesh["dp_size"], mesh["tp"]) == (r // 2, 2, r % 2), r
        assert (mesh["dp_replicate"], mesh["dp_shard"]) == (r // 2, 0), r
        # Our coordinates are torch's: the groups made from the DeviceMesh are the ones we think.
        assert mesh["torch_tp"] == mesh["tp"], r
        assert mesh["torch_dp_replicate"] == mesh["dp_replicate"], r


@pytest.mark.parametrize("order", ["in_order", "shuffled"])
def test_data_is_sharded_by_the_data_parallel_rank(four_ranks, order):
    samples = [seen["samples"][order] for seen in four_ranks]
    assert all(isinstance(s, list) for s in samples), samples  # else the error each rank met
    # A tp pair (the same dp rank) reads the same samples, in the same order.
    assert samples[0] == samples[1] and samples[2] == samples[3]
    # The two dp ranks read disjoint halves that together are the whole set, once.
    assert len(samples[0]) == len(samples[2]) == 20
    assert not set(samples[0]) & set(samples[2])
    assert sorted(samples[0] + samples[2]) == list(range(40))
    if order == "in_order":
        assert samples[0] == list(range(0, 40, 2)) and samples[2] == list(range(1, 40, 2))
    else:
        assert samples[0] != sorted(samples[0])


def test_metrics_are_reduced_over_the_data_parallel_group(four_ranks):
    for r, seen in enumerate(four_ranks):
        reduced = seen["tp_mesh_reduce"]
        # dp groups are the ranks with one tp coordinate: {0, 2} and {1, 3}.
        assert reduced["dp_sum"] == [2.0, 4.0][r % 2], r
        assert reduced["dp_mean"] == [1.0, 2.0][r % 2], r
        assert reduced["dp_max"] == [2.0, 3.0][r % 2], r
        assert reduced["value_after"] == float(r), r  # the argument is left as it was
        # tp groups are neighbours: {0, 1} and {2, 3}.
        assert reduced["tp_sum"] == [1.0, 5.0][r // 2], r
        # Gathered in dp-rank order.
        assert reduced["dp_gather"] == [[r % 2], [r % 2 + 2]], r
        assert reduced["dp_gather_object"] == [f"rank{r % 2}", f"rank{r % 2 + 2}"], r
        assert reduced["world_gather_object"] == [0, 1, 2, 3], r


def test_replicate_by_shard_mesh_is_data_parallel_over_every_process(four_ranks):
    for r, seen in enumerate(four_ranks):
        mesh = seen["dp_mesh"]
        assert mesh["dim_names"] == ["dp_replicate", "dp_shard"]
        assert (mesh["dp_rank"], mesh["dp_size"]) == (r, 4), r
        assert (mesh["dp_replicate"], mesh["dp_shard"]) == (r // 2, r % 2), r
        assert (mesh["torch_dp_replicate"], mesh["torch_dp_shard"]) == (r // 2, r % 2), r
        assert mesh["dp_sum"] == 6.0, r
        assert mesh["dp_shard_sum"] == [1.0, 5.0][r // 2], r  # shard groups {0, 1} and {2, 3}
        assert mesh["dp_replicate_sum"] == [2.0, 4.0][r % 2], r  # replica groups {0, 2} and {1, 3}
        assert mesh["dp_shard_gather"] == [[r // 2 * 2], [r // 2 * 2 + 1]], r


def test_an_hsdp_runtime_shards_data_over_all_four_data_parallel_ranks(four_ranks):
    for r, seen in enumerate(four_ranks):
        runtime = seen["runtime"]
        assert (runtime["dp_rank"], runtime["dp_size"]) == (r, 4), r
        assert (runtime["dp_replicate"], runtime["dp_shard"]) == (2, 2), r
        assert runtime["sampler"] == "DistributedSampler"
        assert (runtime["num_replicas"], runtime["rank"]) == (4, r), r
        assert runtime["samples"] == list(range(r, 40, 4)), r
        assert runtime["all_reduce_sum"] == 6.0, r


def test_an_axis_of_size_one_among_several_processes_has_no_group():
    # torch.distributed reads group=None as "every process": a tp collective on a run without
    # tensor parallelism would silently reduce over the whole world.
    mesh = ParallelMesh(ParallelDims(dp_shard=4).resolved(4), global_rank=1)
    assert mesh.group_size("tp") == 1
    with pytest.raises(ValueError, match="mesh axis 'tp' has size 1: there is no group"):
        mesh.group("tp")
    assert mesh.group("dp") is None  # every process: the default group


def test_hsdp_with_shard_groups_of_one_is_refused():
    from trainmesh.precision import Precision
    from trainmesh.strategies.fsdp import FSDPStrategy
    from trainmesh.strategies.protocol import Placement

    strategy = FSDPStrategy(shard_size=1, placement=Placement("cpu", (0, 1), 1, Precision("32", device_type="cpu")))
    with pytest.raises(ValueError, match="shard groups of 1 process shards nothing.*strategy='ddp'"):
        strategy.dims(2)


def _record_device_meshes(monkeypatch, *, makes_a_group=False):
    import torch.distributed.device_mesh as torch_mesh

    from trainmesh.strategies import mesh as mesh_module
    from trainmesh.strategies import mesh_groups

    made = []

    def record(*args, **kwargs):
        made.append((args, kwargs))
        return types.SimpleNamespace(mesh_dim_names=kwargs["mesh_dim_names"])

    monkeypatch.setattr(torch_mesh, "init_device_mesh", record)
    # a mesh that makes groups is made (or reused) in mesh_groups, after a vote on the default group
    monkeypatch.setattr(
        mesh_groups,
        "shared_device_mesh",
        lambda device_type, shape, names: record(device_type, shape, mesh_dim_names=names),
    )
    monkeypatch.setattr(mesh_module, "_mesh_makes_a_group", lambda: makes_a_group)
    return made


def test_a_one_axis_mesh_over_every_process_is_made_when_first_read(monkeypatch):
    # A plain ddp run never reads it: building torch's layout was ~1,300 Python calls per fit.
    made = _record_device_meshes(monkeypatch)
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: True)
    mesh = ParallelMesh.build(ParallelDims(), global_rank=1, world_size=2, device_type="cpu")
    assert made == []
    assert mesh.group("dp") is None and mesh.dp_rank == 1  # answered without the DeviceMesh
    assert mesh.submesh("dp_shard") is mesh.device_mesh is mesh.device_mesh
    assert made == [(("cpu", (2,)), {"mesh_dim_names": ("dp_shard",)})]  # once
    gone = ParallelMesh.build(ParallelDims(), global_rank=1, world_size=2, device_type="cpu")
    monkeypatch.setattr("torch.distributed.is_initialized", lambda: False)
    assert gone.device_mesh is None and len(made) == 1  # read after the group's teardown: none made


def test_a_mesh_that_makes_groups_is_made_by_every_process_at_build(monkeypatch):
    # new_group is collective: a mesh made on one rank's first read would wait for the others forever.
    made = _record_device_meshes(monkeypatch)
    ParallelMesh.build(ParallelDims(dp_replicate=2, dp_shard=2), global_rank=0, world_size=4, device_type="cpu")
    assert len(made) == 1
    made = _record_device_meshes(monkeypatch, makes_a_group=True)  # CUDA present, gloo default group
    ParallelMesh.build(ParallelDims(), global_rank=0, world_size=2, device_type="cpu")
    assert len(made) == 1


def test_successive_runs_in_one_process_group_do_not_pile_up_groups_threads_or_fds(four_ranks):
    # A run's 2-D meshes (trainmesh's and Lightning's named one) made 2 gloo groups each (6
    # threads, 10 fds) per fit, never destroyed: the counts grew at every fit of a k-fold loop or
    # a batch of test legs. Now the three runs end with the same counts.
    for seen in four_ranks:
        first, second, third = seen["groups_after_runs"]
        assert first == second == third, seen["groups_after_runs"]
