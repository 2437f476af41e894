"""One replica group's seat in torchft's quorum (PyTorch's own fault-tolerance project, an optional
dependency: ``pip install "trainmesh[fault-tolerance]"``), shared by the fault-tolerant strategies (``fault_tolerance.py``).

Each replica group is one trainmesh job (one process, or several sharing a model with fsdp) started
on its own, by the user or a scheduler. torchft's lighthouse forms a quorum of the live groups
before every step; gradients are averaged over that step's quorum only, so a dead group is dropped
from the next step while the others train on. A group started again asks the quorum, gets the
weights, the optimizer state and the loop position from a live peer (torchft's HTTP checkpoint
transport; process ``r`` of a group from process ``r`` of a live one), and steps with the others
again. Nothing here talks to the network itself: the quorum, the all-reduce and the transfer are
torchft's (``torchft.Manager``).
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

from trainmesh.utilities.dtensors import is_dtensor
from trainmesh.utilities.install_hints import install_hint

if TYPE_CHECKING:
    from torchft import Manager


@dataclasses.dataclass(frozen=True)
class FaultTolerance:
    """Where this replica group finds the others: ``Trainer(fault_tolerance=FaultTolerance(...))``.

    Args:
        lighthouse: the address torchft's lighthouse printed (``http://host:29510``).
        replica_group: this group's number, 0 .. ``num_replica_groups`` - 1; it picks the group's
            share of the training data, and it must stay the same when the group is started again.
        num_replica_groups: how many replica groups the run has.
        min_replicas: the fewest groups a step may commit with (torchft's ``min_replica_size``; default 1).
        host: the name the other groups reach this one by (its rendezvous store and checkpoint
            server; default: this machine's host name).
        timeout: how long an all-reduce, a commit or a recovery may take before the step is given up
            (and retried with the next quorum; default 60 s).
        quorum_timeout: how long to wait for a quorum (default 60 s).
        sync: how the groups meet: ``"every_step"`` averages every gradient over the quorum (default);
            ``"local_sgd"`` (torchft's ``LocalSGD``) averages the weights every ``sync_every`` steps;
            ``"diloco"`` (torchft's ``DiLoCo``) every ``sync_every`` steps averages each group's change
            of the weights since the last sync and steps ``outer_optimizer`` with it.
        sync_every: the local steps between two syncs (torchft's ``sync_every``; required with
            ``"local_sgd"`` and ``"diloco"``; default ``None``).
        outer_optimizer: with ``"diloco"``: a callable taking the parameters and returning the outer
            optimizer (an optimizer class, or ``functools.partial(torch.optim.SGD, lr=..)``); default
            ``None``: SGD with lr 0.7, Nesterov momentum 0.9 (the DiLoCo paper's).
        fragments: with ``"diloco"``: Streaming DiLoCo (torchft's ``DiLoCo`` over model fragments):
            the model's top-level layers cut into this many consecutive fragments of about equal
            parameter counts, one synced every ``sync_every / fragments`` steps in turn, each with
            its own outer optimizer; ``sync_every`` must be a multiple of it (default 1: the whole
            model at once).

    Examples:
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
    sync: str = "every_step"
    sync_every: int | None = None
    outer_optimizer: Callable[..., torch.optim.Optimizer] | None = None
    fragments: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.replica_group < self.num_replica_groups:
            raise ValueError(
                f"FaultTolerance: replica_group={self.replica_group} must be in 0 .. num_replica_groups - 1 "
                f"(num_replica_groups={self.num_replica_groups})"
            )
        if not 1 <= self.min_replicas <= self.num_replica_groups:
            raise ValueError(f"FaultTolerance: min_replicas={self.min_replicas} must be in 1 .. num_replica_groups")
        check_sync(self.sync, self.sync_every, self.outer_optimizer)
        if not isinstance(self.fragments, int) or self.fragments < 1:
            raise ValueError(f"FaultTolerance: fragments={self.fragments!r} must be a whole number >= 1")
        if self.fragments != 1 and (self.sync != "diloco" or (self.sync_every or 0) % self.fragments):
            raise ValueError(
                f"FaultTolerance: fragments={self.fragments} is Streaming DiLoCo: it needs sync='diloco' and a "
                f"sync_every that is a multiple of it (got sync={self.sync!r}, sync_every={self.sync_every}); one "
                "fragment is synced every sync_every / fragments steps"
            )


def check_sync(sync: str, sync_every: int | None, outer_optimizer: Any) -> None:
    """FaultTolerance's sync settings, refused before anything starts when they do not fit together."""
    if sync not in ("every_step", "local_sgd", "diloco"):
        raise ValueError(f"FaultTolerance: sync={sync!r}; choose 'every_step', 'local_sgd' or 'diloco'")
    if sync == "every_step":
        if sync_every is not None or outer_optimizer is not None:
            raise ValueError(
                "FaultTolerance: sync_every and outer_optimizer belong to sync='local_sgd' / 'diloco'; with "
                "sync='every_step' every gradient is averaged at every step. Set sync, or drop them"
            )
        return
    if not isinstance(sync_every, int) or sync_every < 1:
        raise ValueError(
            f"FaultTolerance: sync={sync!r} needs sync_every, a whole number of steps >= 1 (got {sync_every!r})"
        )
    if sync == "local_sgd" and outer_optimizer is not None:
        raise ValueError(
            "FaultTolerance: sync='local_sgd' averages the weights and has no outer optimizer; use sync='diloco' "
            "for an outer optimizer, or drop outer_optimizer"
        )


def import_torchft() -> Any:
    """torchft, or an error saying how to get it (it is an optional dependency)."""
    try:
        import torchft
    except ImportError as err:
        raise ImportError(
            f"Trainer(fault_tolerance=...) runs on torchft, which is not importable here ({err}). Install it with "
            f"`{install_hint('fault-tolerance')}` (torchft 0.2.0 is checked with torch 2.13 on CPU), or leave fault_tolerance out"
        ) from err
    return torchft


class ReplicaQuorum:
    """This process's torchft Manager, the step's quorum, and what a recovering peer takes from it."""

    def __init__(self, fault_tolerance: FaultTolerance) -> None:
        self.fault_tolerance = fault_tolerance
        self._manager: Manager | None = None
        self._store: Any = None  # the group's TCPStore (its first process's): the Managers meet there
        self._open = False  # a quorum was started for the step in progress and not committed yet
        self._peer_state: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}

    @property
    def manager(self) -> Manager:
        assert self._manager is not None, "the Manager is built in join"
        return self._manager

    def join(
        self,
        *,
        group_rank: int,
        group_size: int,
        store: tuple[str, int] | None = None,
        device: torch.device | None = None,
    ) -> None:
        """Start this process's Manager. ``store``: the group's TCPStore (host, port) that the group's
        first process made (``make_store``); a group of one process makes its own. With LocalSGD or
        DiLoCo the quorum is synchronous (torchft's DiLoCo requires it: the sync waits for it)."""
        torchft = import_torchft()
        ft = self.fault_tolerance
        if store is None:
            store = self.make_store()
        self._manager = torchft.Manager(
            pg=cross_group_process_group(torchft, device or torch.device("cpu"), ft.timeout),
            load_state_dict=None,
            state_dict=None,
            min_replica_size=ft.min_replicas,
            replica_id=f"trainmesh_{ft.replica_group}",
            lighthouse_addr=ft.lighthouse,
            store_addr=store[0],
            store_port=store[1],
            hostname=ft.host,
            rank=group_rank,
            world_size=group_size,
            timeout=ft.timeout,
            quorum_timeout=ft.quorum_timeout,
            connect_timeout=ft.timeout,
            # torchft's own step-0 sync heals every group but the first from it, and that first step
            # averages the healer's zeroed gradient in (half the first group's gradient, measured);
            # instead every group trains on step 0 and takes the first group's weights just before
            # it (start_from_first_group), as ddp broadcasts rank 0's.
            init_sync=False,
            use_async_quorum=ft.sync == "every_step",
        )
        # What a recovering group takes from a live one: read when a peer needs it, loaded in
        # that group's first should_commit (torchft applies it before the optimizer steps).
        self._manager.register_state_dict_fn("trainmesh", self._load_peer_state, self._peer_state_dict)

    def make_store(self) -> tuple[str, int]:
        """A TCPStore for this group's Managers, served by this process: (host, port)."""
        self._store = torch.distributed.TCPStore(self.fault_tolerance.host, 0, is_master=True, wait_for_workers=False)
        return self.fault_tolerance.host, int(self._store.port)

    def share(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        self._peer_state[key] = (state, load)

    def committing(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        state: Callable[[], Any],
        load: Callable[[Any], None],
    ) -> list[torch.optim.Optimizer]:
        """The run's one optimizer, stepped only when the quorum commits; ``state``/``load``: the
        strategy's model and optimizer state, as a recovering peer takes it."""
        if len(optimizers) != 1:
            raise ValueError(
                f"fault_tolerance: configure_optimizers returned {len(optimizers)} optimizers; torchft commits a step "
                "once (should_commit), so one optimizer is supported. Combine the parameter groups into one optimizer"
            )
        if isinstance(optimizers[0], torch.optim.LBFGS):
            raise ValueError(
                "fault_tolerance: LBFGS calls its closure several times per step; use a first-order optimizer"
            )
        self.share("strategy", state, load)
        return [CommittingOptimizer(optimizers[0], commit=self.commit)]

    def _peer_state_dict(self) -> dict[str, Any]:
        return {key: state() for key, (state, _) in self._peer_state.items()}

    def _load_peer_state(self, state: dict[str, Any]) -> None:
        for key, (_, load) in self._peer_state.items():
            load(state[key])

    def open_step(self, module: nn.Module) -> None:
        """The quorum for this optimizer step (once per step, at an accumulation window's first
        batch): computed in torchft's thread during the forward; the backward's all-reduce waits
        for it. Before the run's first step, every group takes the first group's weights."""
        if self._open:
            return
        self.manager.start_quorum()
        self._open = True
        if self.manager.current_step() == 0:
            start_from_first_group(self.manager, module)

    def commit(self) -> bool:
        """torchft's should_commit: whether every group of the quorum finished the step without an
        error (a dead peer fails the all-reduce: the step is dropped everywhere and retried)."""
        self._open = False
        return bool(self.manager.should_commit())

    def all_reduce_gradient(self, gradient: torch.Tensor) -> None:
        """Average ``gradient`` over the quorum's groups, in place (a non-participating group's zeros).
        A failure (a peer died) is not raised: torchft's wait records it on the Manager, whose
        should_commit then drops the step (``commit``), and every later all-reduce of that step
        returns at once."""
        self.manager.allreduce(gradient).wait()

    def shutdown(self) -> None:
        if self._manager is not None:
            self._manager.shutdown(wait=False)
            self._manager = None


def cross_group_process_group(torchft: Any, device: torch.device, timeout: timedelta) -> Any:
    """torchft's reconfigurable group across the replica groups: NCCL where a group trains on CUDA
    (what crosses is on the GPU), gloo otherwise. Only the choice is tested for NCCL (a CUDA-marked
    test); every run of replica groups is checked on CPU."""
    if device.type == "cuda":
        return torchft.ProcessGroupNCCL(timeout=timeout)
    return torchft.ProcessGroupGloo(timeout=timeout)


def start_from_first_group(manager: Manager, module: nn.Module) -> None:
    """Before the run's first step, every group takes the weights and buffers of the quorum's first
    group: ddp's broadcast from rank 0, done as a sum in which the other groups contribute zeros
    (torchft's group has no broadcast; a sharded tensor's local shard goes to the same process of
    each group). A group that joins a run already past step 0 heals from a peer instead (torchft),
    so this runs only while the quorum is at step 0. If a peer fails here, nothing is copied and the
    step is not committed: the next quorum, still at step 0, tries again."""
    manager.wait_quorum()
    if manager.current_step() != 0 or not manager.is_participating():
        return
    first = manager.participating_rank() == 0
    staged = []
    for tensor in _unique_local_tensors(module):
        wire = torch.view_as_real(tensor) if tensor.is_complex() else tensor
        buffer = wire.clone() if first else torch.zeros_like(wire)
        staged.append((wire, buffer, manager.allreduce(buffer, reduce_op=ReduceOp.SUM)))
    for _, _, work in staged:
        work.wait()
    if manager.errored() is not None:
        return
    with torch.no_grad():
        for wire, buffer, _ in staged:
            wire.copy_(buffer)


def _unique_local_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The module's parameters and buffers (a sharded one's local shard), each once (tied weights),
    detached; bool buffers left out (gloo cannot sum them; a mask buffer is built alike everywhere)."""
    seen: set[int] = set()
    tensors = []
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.dtype == torch.bool or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        tensors.append((tensor.to_local() if is_dtensor(tensor) else tensor).detach())
    return tensors


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
