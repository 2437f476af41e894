"""Replica groups that survive a failure without a job restart, on torchft (PyTorch's own
fault-tolerance project, an optional dependency: ``pip install "trainmesh[fault-tolerance]"``; the quorum, the
all-reduce across groups and the recovery from a peer are ``replica_quorum.py``'s).

Two ways to be a replica group, both averaging every gradient over each step's quorum of groups:
- ``strategy="ddp"``: a group is one process; DDP's comm hook all-reduces its buckets over the quorum;
- ``strategy="fsdp"``: a group is one trainmesh job of any number of processes that shard the model
  among themselves (``fully_shard``), and each shard's gradient, once reduce-scattered inside the
  group, is averaged with the same shard of the other groups (FSDP2's all-reduce hook): HSDP whose
  replicas may die.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.launchers.base import ProcessInfo
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies.capabilities import REPLICATED, StrategyCapabilities
from trainmesh.strategies.data_parallel import StepDispatcher
from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.replica_quorum import FaultTolerance, ReplicaQuorum, import_torchft
from trainmesh.strategies.sampling import shard_dataloader
from trainmesh.strategies.shard_snapshot import ShardSnapshot
from trainmesh.strategies.step import StepHooks, StepResult
from trainmesh.utilities.dtensors import is_dtensor

__all__ = ["FaultTolerance", "FaultTolerantDDPStrategy", "FaultTolerantFSDPStrategy"]

_MANUAL_REFUSAL = (
    "with fault_tolerance a step commits once, after the loop's single optimizer step (torchft's "
    "should_commit); a training_step that steps its own optimizers is not supported. Use automatic "
    "optimization, or leave fault_tolerance out"
)


class FaultTolerantDDPStrategy(DDPStrategy):
    """``strategy="ddp"`` with ``fault_tolerance``: one process per replica group, gradients averaged
    over each step's quorum of groups by torchft."""

    name = "ddp"
    # torchft's wrappers are checked here for automatic optimization with one optimizer only
    # (tests/strategies/test_fault_tolerance.py); DDP over the quorum is untested with compile.
    stated_capabilities = StrategyCapabilities(
        manual_optimization=False,
        manual_optimization_refusal=_MANUAL_REFUSAL,
        memory_model=REPLICATED,
        lightning1_loops=True,  # as plain ddp's (its name was "ddp" when these loops checked names)
        reseeds_each_run=True,
    )
    compile_refusal = (
        "DDP over torchft's quorum is not checked with torch.compile; leave fault_tolerance or compile out"
    )

    def __init__(self, *, fault_tolerance: FaultTolerance, placement: Placement | None = None, **ddp: Any) -> None:
        super().__init__(placement=placement, **ddp)
        if len(self.placement.devices) * self.placement.num_nodes != 1:
            raise ValueError(
                f"fault_tolerance: with strategy='ddp' each replica group is one process, but devices="
                f"{list(self.placement.devices)} and num_nodes={self.placement.num_nodes} ask for more. Start one "
                "trainmesh process per replica group with devices=1, or use strategy='fsdp' for groups of several "
                "processes (the model sharded inside each group, replicated across groups)"
            )
        if self.ddp_options["find_unused_parameters"] or self.ddp_options["static_graph"]:
            raise ValueError(
                "fault_tolerance: the replica groups' DDP sets find_unused_parameters itself (its buckets must never "
                "be rebuilt) and cannot use static_graph; drop them"
            )
        if self.comm_hook is not None and self.placement.device_type == "cuda":
            # On CPU Lightning's DDPStrategy registers no hook (plain all-reduce: ddp.py's setup_module does
            # the same), so torchft's hook is the only one and the run is Lightning's ddp run.
            raise ValueError(
                "fault_tolerance: the replica groups' gradients are averaged by torchft through DDP's communication "
                "hook, which ddp_comm_hook would replace; drop ddp_comm_hook, or leave fault_tolerance out"
            )
        self.fault_tolerance = fault_tolerance
        self.quorum = ReplicaQuorum(fault_tolerance)

    @property
    def manager(self) -> Any:
        return self.quorum.manager

    def setup_environment(self, process: ProcessInfo) -> None:
        super().setup_environment(process)
        self.quorum.join(group_rank=0, group_size=1, device=self._device)

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = self.precision.convert_module(module, device=self._device)
        options = {k: v for k, v in self.ddp_options.items() if k not in ("find_unused_parameters", "static_graph")}
        placed = apply_replica_ddp(StepDispatcher(module), self.quorum, options)
        self._placed = placed
        return placed

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        self._optimizers = list(optimizers)
        return self.quorum.committing(optimizers, self._peer_state_dict, self._load_peer_state)

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        self.quorum.share(key, state, load)

    def _peer_state_dict(self) -> dict[str, Any]:
        return checkpoints.plain_state_dict(self._placed, self._optimizers)

    def _load_peer_state(self, state: dict[str, Any]) -> None:
        checkpoints.load_plain_state_dict(self._placed, self._optimizers, state, strict=True)

    def process_dataloader(
        self,
        loader: Any,
        *,
        train: bool | None = None,
        seed: int = 0,
        shuffle: bool | None = None,
        predict: bool = False,
        wrap_samplers: bool = False,
    ) -> Any:
        if train is None:  # Lightning's one-argument call (a program's subclass's super()): processed already
            return loader
        if not train:
            return loader  # every group validates on the whole set, as the job it is
        # The group's share of the data: fixed by its number, so a group started again reads the
        # same share (torchft's own DistributedSampler does the same).
        ft = self.fault_tolerance
        return shard_dataloader(
            loader,
            dp_rank=ft.replica_group,
            dp_size=ft.num_replica_groups,
            train=True,
            seed=seed,
            shuffle=shuffle,
            wrap_samplers=wrap_samplers,
        )

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        self.quorum.open_step(module)
        return super().train_step(module, batch, batch_idx, sync_grads=sync_grads, hooks=hooks)

    def teardown(self, *, failed: bool = False) -> None:
        self.quorum.shutdown()
        super().teardown(failed=failed)


class FaultTolerantFSDPStrategy(FSDPStrategy):
    """``strategy="fsdp"`` with ``fault_tolerance``: each replica group is one trainmesh job that
    shards the model over its own processes; each shard's gradient, reduce-scattered inside the
    group, is then averaged over the step's quorum of groups (torchft, through FSDP2's all-reduce
    hook), so the groups are HSDP's replicas and one may die while the others train on."""

    def __init__(self, *, fault_tolerance: FaultTolerance, placement: Placement | None = None, **fsdp: Any) -> None:
        super().__init__(placement=placement, **fsdp)
        if self.hybrid:  # hybrid=/shard_size=, or Lightning's sharding_strategy="HYBRID_SHARD"/device_mesh=
            raise ValueError(
                "fault_tolerance: the replica groups are the replicated dimension (each group shards the model "
                "over its own processes); drop hybrid/shard_size (HYBRID_SHARD/device_mesh) and use strategy='fsdp'"
            )
        self.fault_tolerance = fault_tolerance
        self.quorum = ReplicaQuorum(fault_tolerance)

    @property
    def capabilities(self) -> StrategyCapabilities:
        return dataclasses.replace(
            super().capabilities, manual_optimization=False, manual_optimization_refusal=_MANUAL_REFUSAL, compile=False
        )

    @property
    def manager(self) -> Any:
        return self.quorum.manager

    def setup_environment(self, process: ProcessInfo) -> None:
        super().setup_environment(process)
        store = None
        if process.world_size > 1:
            # The group's Managers meet at a store its first process serves.
            shared = [self.quorum.make_store() if process.global_rank == 0 else None]
            torch.distributed.broadcast_object_list(shared, src=0)
            store = shared[0]
        self.quorum.join(
            group_rank=process.global_rank, group_size=process.world_size, store=store, device=self._device
        )

    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import FSDPModule

        import_torchft()
        root = super().setup_module(module)
        for unit in root.modules():
            if isinstance(unit, FSDPModule):
                unit.set_all_reduce_hook(self.quorum.all_reduce_gradient)
        self._placed = root
        return root

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        self._optimizers = list(optimizers)
        # read in torchft's quorum thread during the step: not through the state-dict hooks (shard_snapshot.py)
        self._snapshot = ShardSnapshot(checkpoints.unwrap(self._placed), self._optimizers)
        return self.quorum.committing(optimizers, self._peer_state_dict, self._load_peer_state)

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        self.quorum.share(key, state, load)

    def _peer_state_dict(self) -> dict[str, Any]:
        # This process's shards as plain tensors: process r of a recovering group takes process r's.
        return self._snapshot.read()

    def _load_peer_state(self, state: dict[str, Any]) -> None:
        # This process's own parameters say how each local shard lies in its whole tensor (its
        # optimizer may have no state yet: a group started again has not stepped).
        module = checkpoints.unwrap(self._placed)
        params = checkpoints.sharded_state_dict(module, [], sharded=True)["model"]
        checkpoints.load_sharded_state_dict(module, self._optimizers, _as_shards(state, params), strict=True)

    def process_dataloader(
        self,
        loader: Any,
        *,
        train: bool | None = None,
        seed: int = 0,
        shuffle: bool | None = None,
        predict: bool = False,
        wrap_samplers: bool = False,
    ) -> Any:
        if train is None:  # Lightning's one-argument call (a program's subclass's super()): processed already
            return loader
        if not train:
            # the group validates (and predicts) the whole set
            return super().process_dataloader(
                loader, train=False, seed=seed, predict=predict, wrap_samplers=wrap_samplers
            )
        # The group's processes read consecutive shares of the data: group g's process r is
        # data-parallel rank g x processes + r of them all, fixed when the group starts again.
        ft, mesh = self.fault_tolerance, self._mesh
        return shard_dataloader(
            loader,
            dp_rank=ft.replica_group * mesh.dp_size + mesh.dp_rank,
            dp_size=ft.num_replica_groups * mesh.dp_size,
            train=True,
            seed=seed,
            shuffle=shuffle,
            wrap_samplers=wrap_samplers,
        )

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        self.quorum.open_step(module)
        return super().train_step(module, batch, batch_idx, sync_grads=sync_grads, hooks=hooks)

    def teardown(self, *, failed: bool = False) -> None:
        self.quorum.shutdown()
        super().teardown(failed=failed)


def apply_replica_ddp(module: nn.Module, quorum: ReplicaQuorum, options: dict[str, Any]) -> nn.Module:
    """DDP whose gradient buckets are averaged over the step's quorum of replica groups
    (``quorum.all_reduce_gradient``), as torchft's own DDP wrapper does, but with a comm hook that
    survives a failed all-reduce: torchft 0.2.0's hook asserts on the future that a failed wait
    leaves unbuilt, so a peer dying during the all-reduce crashed the survivor too."""
    from torch.nn.parallel import DistributedDataParallel

    dummy = import_torchft().process_group.ProcessGroupDummy(0, 1)
    # A dummy group soaks up DDP's own broadcast at construction; the buckets go through the hook.
    # find_unused_parameters=True keeps the reducer from rebuilding its buckets after the first step,
    # which a group started again would do differently from the others (torchft's wrapper does the same).
    placed = DistributedDataParallel(module, process_group=dummy, find_unused_parameters=True, **options)
    # DDP compares the hook's annotations with classes, and this module's are postponed (strings).
    placed.register_comm_hook(quorum, lambda state, bucket: _all_reduce_bucket(state, bucket))
    return placed


def _all_reduce_bucket(quorum: ReplicaQuorum, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP's comm hook: the bucket averaged over the quorum, in place. When a peer dies during the
    all-reduce, torchft records the error on the Manager, whose should_commit then drops this group's
    step (the optimizer does not step), so the bucket's garbage is never applied; the step's later
    buckets are not sent. The hook returns normally either way, so the backward ends and the next
    step's quorum leaves the dead group out."""
    buffer: torch.Tensor = bucket.buffer()
    quorum.all_reduce_gradient(buffer)
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(buffer)
    return done


def _as_shards(state: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A peer's ``{"model", "optim"}`` of plain local shards as DTensors laid out as this process's
    parameters (optimizer state is keyed by parameter name; its per-element tensors are shards)."""

    def like(value: Any, param: Any) -> Any:
        if not (is_dtensor(param) and isinstance(value, torch.Tensor) and value.shape == param.to_local().shape):
            return value  # a scalar (Adam's step) or a tensor that is not sharded
        from torch.distributed.tensor import DTensor

        return DTensor.from_local(
            value, param.device_mesh, param.placements, run_check=False, shape=param.shape, stride=param.stride()
        )

    optim = [
        {
            **saved,
            "state": {
                name: {k: like(v, params.get(name)) for k, v in entry.items()} for name, entry in saved["state"].items()
            },
        }
        for saved in state["optim"]
    ]
    return {"model": {name: like(value, params[name]) for name, value in state["model"].items()}, "optim": optim}
