"""Replica groups that meet every ``sync_every`` steps instead of every step
(``FaultTolerance(sync="local_sgd" | "diloco")``): training across slow links.

Each group (one process, ``strategy="ddp"``) steps its own optimizer on its own gradients; after every
``sync_every``-th step torchft's own ``LocalSGD`` (the weights averaged over the quorum) or ``DiLoCo``
(each group's change since the last sync averaged, and applied by an outer optimizer to the weights of
the last sync) runs from the optimizer's step hooks. Nothing here averages anything itself: the quorum,
the all-reduce and the outer step are torchft's; this file only builds them around the user's model
and optimizer and leaves the gradients local.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.strategies.data_parallel import StepDispatcher
from trainmesh.strategies.fault_tolerance import FaultTolerantDDPStrategy
from trainmesh.strategies.replica_quorum import ReplicaQuorum, import_torchft, start_from_first_group
from trainmesh.strategies.step import StepHooks, StepResult

__all__ = ["SemiSyncDDPStrategy", "outer_optimizer_factory"]

_RESUME_REFUSAL = (
    "fault_tolerance with sync={sync!r}: loading a checkpoint is not supported yet. torchft's {sync} keeps "
    "state outside the model and optimizer (the weights of the last sync{outer}) that trainmesh's checkpoint "
    "does not hold, so a resume mid-interval would not continue the run exactly. Start the run from scratch, "
    "or use sync='every_step' (its groups resume)"
)


def outer_optimizer_factory(fault_tolerance: Any) -> Any:
    """The DiLoCo outer optimizer's factory: the user's, or the DiLoCo paper's (SGD, lr 0.7, Nesterov 0.9)."""
    if fault_tolerance.outer_optimizer is not None:
        return fault_tolerance.outer_optimizer
    return functools.partial(torch.optim.SGD, lr=0.7, momentum=0.9, nesterov=True)


class SemiSyncDDPStrategy(FaultTolerantDDPStrategy):
    """``strategy="ddp"`` with ``FaultTolerance(sync="local_sgd" | "diloco")``: one process per replica
    group, local gradients, torchft's LocalSGD / DiLoCo every ``sync_every`` optimizer steps."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = self.precision.convert_module(module, device=self._device)
        options = {k: v for k, v in self.ddp_options.items() if k not in ("find_unused_parameters", "static_graph")}
        placed = _local_ddp(StepDispatcher(module), options)
        self._placed = placed
        return placed

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        # The one-optimizer and LBFGS refusals of the per-step groups hold here too (one step hook per
        # optimizer step); the committing wrapper they return is not used: the inner steps are local.
        self.quorum.committing(optimizers, self._peer_state_dict, self._load_peer_state)
        self._optimizers = list(optimizers)
        inner = optimizers[0]
        self._start_together()
        self._sync = _semi_sync(self.fault_tolerance, self.quorum, self._placed, inner)
        self._sync.__enter__()
        return [inner]

    def _start_together(self) -> None:
        """Every group takes the first group's weights before its first local step (as ddp broadcasts
        rank 0's): one quorum at setup; DiLoCo then saves these weights as its first global ones."""
        manager = self.quorum.manager
        manager.start_quorum()
        start_from_first_group(manager, self._placed)
        if not manager.should_commit():
            raise RuntimeError(
                "fault_tolerance: a replica group failed while the groups took the first group's weights "
                "before training; start the run again"
            )

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        # No per-step quorum: LocalSGD / DiLoCo start one at each sync, from the optimizer's step hook.
        return super(FaultTolerantDDPStrategy, self).train_step(
            module, batch, batch_idx, sync_grads=sync_grads, hooks=hooks
        )

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        sync = self.fault_tolerance.sync
        outer = " and the outer optimizer's state" if sync == "diloco" else ""
        raise ValueError(_RESUME_REFUSAL.format(sync=sync, outer=outer))

    def teardown(self, *, failed: bool = False) -> None:
        sync = getattr(self, "_sync", None)
        if sync is not None:
            sync.__exit__(None, None, None)  # removes torchft's hooks from the user's optimizer
            self._sync = None
        super().teardown(failed=failed)


def _semi_sync(fault_tolerance: Any, quorum: ReplicaQuorum, module: nn.Module, inner: torch.optim.Optimizer) -> Any:
    """torchft's LocalSGD or DiLoCo over ``module``'s parameters, driven by ``inner``'s step hooks."""
    import_torchft()  # the error saying how to install it, if it is missing
    from torchft import local_sgd

    every = fault_tolerance.sync_every
    if fault_tolerance.sync == "local_sgd":
        return local_sgd.LocalSGD(quorum.manager, module, inner, sync_every=every)
    outer = outer_optimizer_factory(fault_tolerance)(module.parameters())
    return local_sgd.DiLoCo(quorum.manager, [module], inner, outer, sync_every=every)


def _local_ddp(module: nn.Module, options: dict[str, Any]) -> nn.Module:
    """DDP over a one-process dummy group whose comm hook leaves each gradient bucket as it is: the
    strategy's step (no_sync, accumulation) stays DDP's, but gradients never leave the group."""
    from torch.nn.parallel import DistributedDataParallel

    dummy = import_torchft().process_group.ProcessGroupDummy(0, 1)
    placed = DistributedDataParallel(module, process_group=dummy, find_unused_parameters=True, **options)
    placed.register_comm_hook(None, lambda state, bucket: _keep_bucket(bucket))
    return placed


def _keep_bucket(bucket: Any) -> torch.futures.Future[torch.Tensor]:
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done
