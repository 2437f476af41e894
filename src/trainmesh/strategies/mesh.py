"""One named device mesh per run: how the processes divide the work.

Every run has one ``ParallelMesh``, described by a ``ParallelDims`` value (torchtitan's idea):
``pp`` pipeline stages, ``dp_replicate`` replica groups, ``dp_shard`` shards of each replica,
``tp`` tensor-parallel ways. Their product is the number of processes. Data is sharded by the
data-parallel rank and size (the ``dp_replicate`` x ``dp_shard`` coordinates), metrics are
reduced over the data-parallel group; with data parallelism alone the mesh is 1-D and the
data-parallel rank is the global rank.

>>> dims = ParallelDims(dp_replicate=2, dp_shard=-1).resolved(8)
>>> dims.dp_shard, dims.dp_size
(4, 8)
>>> ParallelMesh(dims, global_rank=5).dp_rank
5
"""

from __future__ import annotations

import dataclasses
from typing import Any

AXES = ("pp", "dp_replicate", "dp_shard", "tp")  # outermost first: ranks next to each other share a tp group


@dataclasses.dataclass(frozen=True)
class ParallelDims:
    """How many ways each parallelism divides the processes; ``-1`` means "the rest".

    Args:
        dp_replicate: replicas (default ``1``).
        dp_shard: sharding degree (-1: the rest) (default ``-1``).
        tp: tensor-parallel degree (default ``1``).
        pp: pipeline stages (default ``1``).
        order: the axes' layout over consecutive ranks, outermost first.

    Examples:
        >>> ParallelDims(dp_shard=2, tp=2).resolved(4).dp_shard
        2
    """

    dp_replicate: int = 1
    dp_shard: int = -1
    tp: int = 1
    pp: int = 1
    # How consecutive ranks are laid out, outermost axis first. The default keeps a tensor-parallel
    # group on neighbouring ranks (one node) and puts pipeline stages furthest apart (their traffic
    # is the lightest); a model split over a machine's devices and replicated across machines
    # (pp_within_node) puts "pp" inside "dp_replicate" instead.
    order: tuple[str, ...] = AXES

    def resolved(self, world_size: int) -> ParallelDims:
        """These dims with ``-1`` filled in, checked against ``world_size`` processes."""
        if sorted(self.order) != sorted(AXES):
            raise ValueError(f"mesh order {self.order} must name each of {AXES} once")
        sizes = {axis: getattr(self, axis) for axis in AXES}
        bad = {axis: size for axis, size in sizes.items() if not isinstance(size, int) or size == 0 or size < -1}
        if bad:
            raise ValueError(f"mesh sizes must be positive integers or -1 (the rest); got {bad}")
        rest = [axis for axis, size in sizes.items() if size == -1]
        if len(rest) > 1:
            default = (
                " (dp_shard is -1 unless given: set dp_shard=1 for another axis to take the rest)"
                if "dp_shard" in rest
                else ""
            )
            raise ValueError(f"only one mesh axis may be -1 (the rest of the processes); {rest} are{default}")
        known = 1
        for size in sizes.values():
            known *= size if size != -1 else 1
        if rest:
            if world_size % known:
                raise ValueError(
                    f"{world_size} processes cannot be divided into {_describe(sizes)}: {known} does not divide "
                    f"{world_size}. Use a number of devices that {known} divides, or other sizes"
                )
            sizes[rest[0]] = world_size // known
        elif known != world_size:
            raise ValueError(
                f"the mesh {_describe(sizes)} needs {known} process{'es' if known != 1 else ''}, but the run has "
                f"{world_size}; make the sizes multiply to the number of processes (devices x nodes), or give one as -1"
            )
        return ParallelDims(**sizes, order=tuple(self.order))

    @property
    def dp_size(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.tp

    def used_axes(self) -> tuple[str, ...]:
        """The axes that divide anything (size > 1), outermost first; () for one process."""
        return tuple(axis for axis in self.order if getattr(self, axis) > 1)


def _mesh_makes_a_group() -> bool:
    """Whether torch's 1-D mesh over every process makes a new group (every process must then
    build it together): it does where CUDA is present and the default group is gloo."""
    import torch
    import torch.distributed as dist

    return torch.cuda.is_available() and dist.get_backend() == "gloo"


def _describe(sizes: dict[str, int]) -> str:
    named = " x ".join(f"{axis}={size}" for axis, size in sizes.items() if size != 1)
    return named or "of one process (every size 1)"


class ParallelMesh:
    """The run's mesh: this process's coordinates on each axis, and the groups along them.

    The ``DeviceMesh`` (``device_mesh``) exists once the process group does (``build``: made
    then, or on first read where no process has to join in); a one-process run has none and
    answers every question locally.

    Args:
        dims: the resolved :class:`ParallelDims`.
        global_rank: this process's rank (default ``0``).
        device_mesh: the named ``DeviceMesh`` (None before the process group exists) (default ``None``).
        make_mesh: a function making the ``DeviceMesh`` on its first read, where ``device_mesh`` is
            None (``build`` passes one for a mesh that needs no group of its own) (default ``None``).

    Examples:
        >>> runtime.mesh.dp_rank, runtime.mesh.dp_size  # doctest: +SKIP
        (0, 2)
    """

    def __init__(
        self, dims: ParallelDims, *, global_rank: int = 0, device_mesh: Any = None, make_mesh: Any = None
    ) -> None:
        assert all(getattr(dims, axis) >= 1 for axis in AXES), "resolve the dims first"
        self.dims = dims
        self.global_rank = global_rank
        self._device_mesh = device_mesh
        # A mesh made on first read (build: one that needs no group of its own); None: none to make.
        self._make_mesh = make_mesh
        # Row-major coordinates over the dims' order, as init_device_mesh lays the ranks out.
        coordinates: dict[str, int] = {}
        rest = global_rank
        for axis in reversed(dims.order):
            size = getattr(dims, axis)
            coordinates[axis], rest = rest % size, rest // size
        self.coordinates = coordinates

    @classmethod
    def build(cls, dims: ParallelDims, *, global_rank: int, world_size: int, device_type: str) -> ParallelMesh:
        """Resolve ``dims`` for the run and make the named ``DeviceMesh`` over its used axes.

        A 1-D mesh over every process reuses the default process group (no new group is made).
        """
        dims = dims.resolved(world_size)
        if world_size == 1:
            return cls(dims, global_rank=global_rank)
        from torch.distributed.device_mesh import init_device_mesh

        from trainmesh.strategies.mesh_groups import shared_device_mesh

        axes = dims.used_axes() or ("dp_replicate",)
        shape = tuple(getattr(dims, axis) for axis in axes)

        if len(axes) == 1 and not _mesh_makes_a_group():
            # A 1-D mesh over every process reuses the default group: nothing collective, so it
            # can wait for its first reader (a plain ddp run has none; building it costs ~1,300
            # Python calls of torch's layout code per fit).
            return cls(
                dims,
                global_rank=global_rank,
                make_mesh=lambda: init_device_mesh(device_type, shape, mesh_dim_names=axes),
            )
        # One that makes groups is made once per layout and reused by later runs (mesh_groups.py)
        return cls(dims, global_rank=global_rank, device_mesh=shared_device_mesh(device_type, shape, axes))

    @property
    def device_mesh(self) -> Any:
        """The named ``DeviceMesh``; None on one process (and, where it was never read, once the
        process group is gone: making it then would start a group of its own)."""
        if self._device_mesh is None and self._make_mesh is not None:
            import torch.distributed as dist

            if not dist.is_initialized():
                return None
            self._device_mesh, self._make_mesh = self._make_mesh(), None
        return self._device_mesh

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    def rank(self, axis: str) -> int:
        """This process's index along ``axis``."""
        return self.coordinates[self._axis(axis)]

    def global_rank_with(self, **coordinates: int) -> int:
        """The global rank of the process at this one's coordinates, changed where given
        (``mesh.global_rank_with(pp=mesh.group_size("pp") - 1)``: this rank's last stage)."""
        where = {**self.coordinates, **coordinates}
        rank = 0
        for axis in self.dims.order:
            rank = rank * getattr(self.dims, axis) + where[axis]
        return rank

    @property
    def dp_rank(self) -> int:
        """This process's place among the data-parallel replicas and shards: which data it reads."""
        return self.coordinates["dp_replicate"] * self.dims.dp_shard + self.coordinates["dp_shard"]

    @property
    def dp_size(self) -> int:
        return self.dims.dp_size

    def submesh(self, *axes: str) -> Any:
        """The ``DeviceMesh`` along ``axes`` (flattened into one dimension when several); None
        on one process. Axes of size 1 are left out."""
        if self.device_mesh is None:
            return None
        used = [self._axis(axis) for axis in axes if getattr(self.dims, self._axis(axis)) > 1]
        if not used:
            return None
        names = self.device_mesh.mesh_dim_names
        if tuple(used) == tuple(names):
            return self.device_mesh
        if len(used) == 1:
            return self.device_mesh[used[0]]
        flat_name = "_".join(used)
        return self.device_mesh[tuple(used)]._flatten(flat_name)

    def group(self, axis: str = "dp") -> Any:
        """The process group along ``axis`` ("dp" is replicate x shard); None means "every
        process" (the default group). An axis of size 1 has none (ValueError)."""
        axes = ("dp_replicate", "dp_shard") if axis == "dp" else (axis,)
        sizes = [getattr(self.dims, self._axis(a)) for a in axes]
        product = 1
        for size in sizes:
            product *= size
        if product == self.world_size:
            return None  # the default group: no need to ask the mesh
        if product == 1:
            # None would mean "every process" to torch.distributed: a collective meant for this
            # axis alone would silently run over the whole world.
            raise ValueError(f"mesh axis {axis!r} has size 1: there is no group to talk to; check group_size() first")
        sub = self.submesh(*axes)
        assert sub is not None, "a mesh with several processes has a DeviceMesh once the process group exists"
        return sub.get_group()

    def group_size(self, axis: str = "dp") -> int:
        if axis == "dp":
            return self.dp_size
        size: int = getattr(self.dims, self._axis(axis))
        return size

    @staticmethod
    def _axis(axis: str) -> str:
        if axis not in AXES:
            raise ValueError(f"mesh axis {axis!r} is not known; the axes are {AXES} (and 'dp' for replicate x shard)")
        return axis

    def __repr__(self) -> str:
        used = ", ".join(f"{axis}={getattr(self.dims, axis)}" for axis in self.dims.used_axes()) or "one process"
        return f"ParallelMesh({used}; rank {self.global_rank}, dp_rank {self.dp_rank})"
