"""Replica groups that survive a failure without a job restart, on torchft (PyTorch's own
fault-tolerance project, an optional dependency: ``pip install torchft``).

Each replica group is one trainmesh process (``Trainer(devices=1, strategy="ddp",
fault_tolerance=FaultTolerance(...))``) started on its own, by the user or a scheduler. torchft's
lighthouse forms a quorum of the live groups before every step; gradients are averaged over that
step's quorum only (torchft's DDP wrapper and its reconfigurable gloo group), so a dead group is
dropped from the next step while the others train on. A group started again asks the quorum, gets
the weights, the optimizer state and the loop position from a live peer (torchft's HTTP checkpoint
transport), and steps with the others again. Nothing here talks to the network itself: the
quorum, the all-reduce and the transfer are torchft's (``torchft.Manager``).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed import ReduceOp

from trainmesh.launchers.base import ProcessInfo
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies.capabilities import REPLICATED, StrategyCapabilities
from trainmesh.strategies.data_parallel import StepDispatcher
from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.sampling import shard_dataloader
from trainmesh.strategies.step import StepHooks, StepResult

if TYPE_CHECKING:
    from torchft import Manager


@dataclasses.dataclass(frozen=True)
class FaultTolerance:
    """Where this replica group finds the others: ``Trainer(fault_tolerance=FaultTolerance(...))``.

    - ``lighthouse``: the address torchft's lighthouse printed (``http://host:29510``);
    - ``replica_group``: this group's number, 0 .. ``num_replica_groups`` - 1; it picks the group's
      share of the training data, and it must stay the same when the group is started again;
    - ``min_replicas``: the fewest groups a step may commit with (torchft's ``min_replica_size``);
    - ``host``: the name the other groups reach this one by (its rendezvous store and checkpoint server);
    - ``timeout``: how long an all-reduce, a commit or a recovery may take before the step is
      given up (and retried with the next quorum); ``quorum_timeout``: how long to wait for a quorum.

    >>> FaultTolerance("http://localhost:29510", replica_group=1, num_replica_groups=2).min_replicas
    1
    """

    lighthouse: str
    replica_group: int
    num_replica_groups: int
    min_replicas: int = 1
    host: str = dataclasses.field(default_factory=socket.gethostname)
    timeout: timedelta = timedelta(seconds=60)
    quorum_timeout: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        if not 0 <= self.replica_group < self.num_replica_groups:
            raise ValueError(
                f"FaultTolerance: replica_group={self.replica_group} must be in 0 .. num_replica_groups - 1 "
                f"(num_replica_groups={self.num_replica_groups})"
            )
        if not 1 <= self.min_replicas <= self.num_replica_groups:
            raise ValueError(f"FaultTolerance: min_replicas={self.min_replicas} must be in 1 .. num_replica_groups")


def import_torchft() -> Any:
    """torchft, or an error saying how to get it (it is an optional dependency)."""
    try:
        import torchft
    except ImportError as err:
        raise ImportError(
            f"Trainer(fault_tolerance=...) runs on torchft, which is not importable here ({err}). Install it with "
            "`pip install torchft` (0.2.0 is checked with torch 2.13 on CPU), or leave fault_tolerance out"
        ) from err
    return torchft


class FaultTolerantDDPStrategy(DDPStrategy):
    """``strategy="ddp"`` with ``fault_tolerance``: one process per replica group, gradients averaged
    over each step's quorum of groups by torchft."""

    name = "ddp"
    # torchft's wrappers are checked here for automatic optimization with one optimizer only
    # (tests/strategies/test_fault_tolerance.py); its DDP wrapper is untested with compile.
    stated_capabilities = StrategyCapabilities(
        manual_optimization=False,
        manual_optimization_refusal=(
            "with fault_tolerance a step commits once, after the loop's single optimizer step (torchft's "
            "should_commit); a training_step that steps its own optimizers is not supported. Use automatic "
            "optimization, or leave fault_tolerance out"
        ),
        memory_model=REPLICATED,
    )
    compile_refusal = "torchft's DDP wrapper is not checked with torch.compile; leave fault_tolerance or compile out"

    def __init__(self, *, fault_tolerance: FaultTolerance, placement: Placement | None = None, **ddp: Any) -> None:
        super().__init__(placement=placement, **ddp)
        if len(self.placement.devices) * self.placement.num_nodes != 1:
            raise ValueError(
                f"fault_tolerance: each replica group is one process, but devices={list(self.placement.devices)} "
                f"and num_nodes={self.placement.num_nodes} ask for more. Start one trainmesh process per replica "
                "group with devices=1 (groups of several processes, HSDP-style, are not supported yet)"
            )
        if self.ddp_options["find_unused_parameters"] or self.ddp_options["static_graph"]:
            raise ValueError("fault_tolerance: torchft's DDP wrapper sets find_unused_parameters itself; drop it")
        self.fault_tolerance = fault_tolerance
        self._manager: Manager | None = None
        self._store: Any = None  # this group's TCPStore: the Manager and the quorum's gloo group meet there
        self._quorum_open = False  # a quorum was started for the step in progress and not committed yet
        self._peer_state: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}

    @property
    def manager(self) -> Manager:
        assert self._manager is not None, "the Manager is built in setup_environment"
        return self._manager

    def setup_environment(self, process: ProcessInfo) -> None:
        super().setup_environment(process)
        torchft = import_torchft()
        ft = self.fault_tolerance
        self._store = torch.distributed.TCPStore(ft.host, 0, is_master=True, wait_for_workers=False)
        self._manager = torchft.Manager(
            pg=torchft.ProcessGroupGloo(timeout=ft.timeout),
            load_state_dict=None,
            state_dict=None,
            min_replica_size=ft.min_replicas,
            replica_id=f"trainmesh_{ft.replica_group}",
            lighthouse_addr=ft.lighthouse,
            store_addr=ft.host,
            store_port=self._store.port,
            hostname=ft.host,
            rank=0,
            world_size=1,
            timeout=ft.timeout,
            quorum_timeout=ft.quorum_timeout,
            connect_timeout=ft.timeout,
            # torchft's own step-0 sync heals every group but the first from it, and that first step
            # averages the healer's zeroed gradient in (half the first group's gradient, measured);
            # instead every group trains on step 0 and takes the first group's weights just before
            # it (start_from_first_group), as ddp broadcasts rank 0's.
            init_sync=False,
        )
        # What a recovering group takes from a live one: read when a peer needs it, loaded in
        # that group's first should_commit (torchft applies it before the optimizer steps).
        self._manager.register_state_dict_fn("trainmesh", self._load_peer_state, self._peer_state_dict)

    def setup_module(self, module: nn.Module) -> nn.Module:
        torchft = import_torchft()
        module = self.precision.convert_module(module, device=self._device)
        # torchft's DDP: a dummy group soaks up DDP's own broadcast, its comm hook all-reduces the
        # buckets over the quorum (Manager.allreduce), averaging by the number of participants.
        options = {k: v for k, v in self.ddp_options.items() if k not in ("find_unused_parameters", "static_graph")}
        placed: nn.Module = torchft.DistributedDataParallel(self.manager, StepDispatcher(module), **options)
        self._placed = placed
        return placed

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        if len(optimizers) != 1:
            raise ValueError(
                f"fault_tolerance: configure_optimizers returned {len(optimizers)} optimizers; torchft commits a step "
                "once (should_commit), so one optimizer is supported. Combine the parameter groups into one optimizer"
            )
        if isinstance(optimizers[0], torch.optim.LBFGS):
            raise ValueError(
                "fault_tolerance: LBFGS calls its closure several times per step; use a first-order optimizer"
            )
        self._optimizers = list(optimizers)
        return [CommittingOptimizer(optimizers[0], commit=self.commit)]

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        self._peer_state[key] = (state, load)

    def _peer_state_dict(self) -> dict[str, Any]:
        placed = checkpoints.plain_state_dict(self._placed, self._optimizers)
        return {"strategy": placed, **{key: state() for key, (state, _) in self._peer_state.items()}}

    def _load_peer_state(self, state: dict[str, Any]) -> None:
        checkpoints.load_plain_state_dict(self._placed, self._optimizers, state["strategy"], strict=True)
        for key, (_, load) in self._peer_state.items():
            load(state[key])

    def process_dataloader(self, loader: Any, *, train: bool, seed: int) -> Any:
        if not train:
            return loader  # every group validates on the whole set, as the job it is
        # The group's share of the data: fixed by its number, so a group started again reads the
        # same share (torchft's own DistributedSampler does the same).
        ft = self.fault_tolerance
        return shard_dataloader(
            loader, dp_rank=ft.replica_group, dp_size=ft.num_replica_groups, train=True, seed=seed, longest=int
        )

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        if not self._quorum_open:
            # The quorum for this optimizer step is computed in torchft's thread during the forward;
            # the backward's all-reduce waits for it (at an accumulation window's first batch).
            self.manager.start_quorum()
            self._quorum_open = True
            if self.manager.current_step() == 0:
                start_from_first_group(self.manager, module)
        return super().train_step(module, batch, batch_idx, sync_grads=sync_grads, hooks=hooks)

    def commit(self) -> bool:
        """torchft's should_commit: whether every group of the quorum finished the step without an
        error (a dead peer fails the all-reduce: the step is dropped everywhere and retried)."""
        self._quorum_open = False
        return bool(self.manager.should_commit())

    def teardown(self, *, failed: bool = False) -> None:
        if self._manager is not None:
            self._manager.shutdown(wait=False)
            self._manager = None
        super().teardown(failed=failed)


class CommittingOptimizer(torch.optim.Optimizer):
    """The user's optimizer, stepped only when torchft commits the step (torchft.Optimizer's rule;
    the closure of an overridden ``optimizer_step`` runs first, as torch's ``step(closure)`` would)."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, commit: Callable[[], bool]) -> None:
        # Not Optimizer.__init__: every attribute is the wrapped optimizer's (as torchft.Optimizer).
        self.optimizer = optimizer
        self._commit = commit

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        result = closure() if closure is not None else None
        if self._commit():
            self.optimizer.step()
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults


def start_from_first_group(manager: Manager, module: nn.Module) -> None:
    """Before the run's first step, every group takes the weights and buffers of the quorum's first
    group: ddp's broadcast from rank 0, done as a sum in which the other groups contribute zeros
    (torchft's group has no broadcast). A group that joins a run already past step 0 heals from a
    peer instead (torchft), so this runs only while the quorum is at step 0. If a peer fails here,
    nothing is copied and the step is not committed: the next quorum, still at step 0, tries again."""
    manager.wait_quorum()
    if manager.current_step() != 0 or not manager.is_participating():
        return
    first = manager.participating_rank() == 0
    staged = []
    for tensor in _unique_tensors(module):
        wire = torch.view_as_real(tensor.detach()) if tensor.is_complex() else tensor.detach()
        buffer = wire.clone() if first else torch.zeros_like(wire)
        staged.append((wire, buffer, manager.allreduce(buffer, reduce_op=ReduceOp.SUM)))
    for _, _, work in staged:
        work.wait()
    if manager.errored() is not None:
        return
    with torch.no_grad():
        for wire, buffer, _ in staged:
            wire.copy_(buffer)


def _unique_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The module's parameters and buffers, each storage once (tied weights), bool buffers left out
    (gloo cannot sum them; a mask buffer is built alike everywhere)."""
    seen: set[int] = set()
    tensors = []
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.dtype == torch.bool or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        tensors.append(tensor)
    return tensors
