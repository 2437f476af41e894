"""Replica groups that meet every ``sync_every`` steps instead of every step
(``FaultTolerance(sync="local_sgd" | "diloco")``): training across slow links.

Each group (one process, ``strategy="ddp"``) steps its own optimizer on its own gradients; after every
``sync_every``-th step torchft's own ``LocalSGD`` (the weights averaged over the quorum) or ``DiLoCo``
(each group's change since the last sync averaged, and applied by an outer optimizer to the weights of
the last sync) runs from the optimizer's step hooks. Nothing here averages anything itself: the quorum,
the all-reduce and the outer step are torchft's; this file only builds them around the user's model
and optimizer and leaves the gradients local.

A checkpoint holds, besides ddp's model and inner optimizer, the state between syncs (in the inner
optimizer's entry): the local steps since the last sync, torchft's step count, and DiLoCo's weights
of the last sync and outer optimizer state as torchft's own fragments export them to a recovering
peer. Each group writes and resumes from its own checkpoint (its local weights differ mid-interval).

A group (re)started into a run in progress asks for a quorum before its first step, which meets
the others at their next sync: torchft heals it there from a live peer (the weights and inner
optimizer after the peer's step, the loop's step count, DiLoCo's state, torchft's step count) and
it takes part in that sync, as a group joining torchft's own loop does at its first sync.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies.data_parallel import StepDispatcher
from trainmesh.strategies.fault_tolerance import FaultTolerantDDPStrategy
from trainmesh.strategies.replica_quorum import (
    CommittingOptimizer,
    ReplicaQuorum,
    import_torchft,
    start_from_first_group,
)
from trainmesh.strategies.step import StepHooks, StepResult
from trainmesh.utilities.install_hints import install_hint

__all__ = ["SemiSyncDDPStrategy", "outer_optimizer_factory"]

# The semi-synchronous state a checkpoint carries, inside the inner optimizer's entry (the strategy's
# part of the checkpoint): the position inside the interval, torchft's step count, and each DiLoCo
# fragment's weights of the last sync and outer optimizer state as torchft's own fragment exports them.
SEMI_SYNC_KEY = "trainmesh_semi_sync"
_FRAGMENT_PREFIX = "StreamingDiLoCoFragment_"  # the key torchft's DiLoCo fragments register their state under
_FRAGMENT_ORDER = "turned-by-one"  # how fragments map to torchft's keys in a checkpoint (see _sync_state)

_NOT_SEMI_SYNC = (
    "fault_tolerance with sync={sync!r}: {source} was not written by a sync={sync!r} run, so it lacks the state "
    "kept between syncs (the position inside the interval{outer}); resuming from it would not continue a run. "
    "Resume from a checkpoint of this run, or load only the weights into the module and fit without ckpt_path"
)


def outer_optimizer_factory(fault_tolerance: Any) -> Any:
    """The DiLoCo outer optimizer's factory: the user's, or the DiLoCo paper's (SGD, lr 0.7, Nesterov 0.9)."""
    if fault_tolerance.outer_optimizer is not None:
        return fault_tolerance.outer_optimizer
    return functools.partial(torch.optim.SGD, lr=0.7, momentum=0.9, nesterov=True)


class SemiSyncDDPStrategy(FaultTolerantDDPStrategy):
    """``strategy="ddp"`` with ``FaultTolerance(sync="local_sgd" | "diloco")``: one process per replica
    group, local gradients, torchft's LocalSGD / DiLoCo every ``sync_every`` optimizer steps."""

    _sync: Any = None  # torchft's LocalSGD / DiLoCo, entered in setup_optimizers
    _resuming = False  # a checkpoint of this run was read: each group continues from its own weights
    _starting = False  # the first step is still to come: it starts with the groups' first quorum
    _joined = False  # this step's quorum healed this group inside the others' sync: no local step of its own

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
        # optimizer step); the wrapper they return is not used: the inner steps commit no quorum.
        self.quorum.committing(optimizers, self._peer_state_dict, self._load_peer_state)
        self._optimizers = list(optimizers)
        inner = optimizers[0]
        # Built before the first quorum: DiLoCo registers its state with torchft's Manager here, so a
        # group healed at that quorum takes the peer's weights of the last sync and outer state too.
        self._sync = _semi_sync(self.fault_tolerance, self.quorum, self._placed, inner)
        check_torchft_internals(self._sync)
        self._sync.__enter__()
        self._starting = not self._resuming
        # The inner optimizer steps (and LocalSGD / DiLoCo sync from its hooks) unless this step
        # healed the group: it then holds the peer's state after the peer's own step.
        return [CommittingOptimizer(inner, commit=self._steps_locally)]

    def _steps_locally(self) -> bool:
        joined, self._joined = self._joined, False
        return not joined

    def _start_or_join(self) -> None:
        """The groups' first quorum, before this group's first forward. Groups starting together take
        the first group's weights (as ddp broadcasts rank 0's), and that quorum is torchft's step 1.
        A group started into a run in progress (torchft's step is > 0 there after every start) meets
        the others at their next sync; torchft heals it in start_quorum (sync quorum: at once, from a
        live peer), and it takes part in that sync as the others do."""
        manager = self.quorum.manager
        manager.start_quorum()
        if manager.current_step() != 0:  # healed: the others are in a sync, waiting for this group's part
            _sync_after_quorum(self._sync)
            self._joined = True  # this step's own inner step would count the peer's step twice
            return
        start_from_first_group(manager, self._placed)
        if not manager.should_commit():
            raise RuntimeError(
                "fault_tolerance: a replica group failed while the groups took the first group's weights "
                "before training; start the run again"
            )
        if _is_diloco(self._sync):  # the weights just taken are the first sync's
            self._sync._save_parameters()

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        if self._starting:
            self._starting = False
            self._start_or_join()
        # No per-step quorum: LocalSGD / DiLoCo start one at each sync, from the optimizer's step hook.
        return super(FaultTolerantDDPStrategy, self).train_step(
            module, batch, batch_idx, sync_grads=sync_grads, hooks=hooks
        )

    # ---- checkpoints: the model and the inner optimizer as ddp's, plus the state between syncs -----------
    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        state = super().state_dict(module, optimizers, sharded=sharded)
        if state["optim"] and self._sync is not None:
            state["optim"][0] = {**state["optim"][0], SEMI_SYNC_KEY: _sync_state(self.fault_tolerance, self._sync)}
        return state

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        # Checked as it is read, before its weights reach the module.
        checkpoint = super().load_checkpoint(path, module, optimizers, keys=keys)
        saved = checkpoint.get(keys.optimizers)
        if isinstance(saved, list) and saved and isinstance(saved[0], dict):
            if SEMI_SYNC_KEY not in saved[0]:
                sync = self.fault_tolerance.sync
                outer = ", the weights of the last sync and the outer optimizer's state" if sync == "diloco" else ""
                raise ValueError(_NOT_SEMI_SYNC.format(sync=sync, source=path, outer=outer))
            _check_same_sync(self.fault_tolerance, saved[0][SEMI_SYNC_KEY], path)
            self._resuming = True  # each group continues from its own weights: none is copied at setup
        return checkpoint

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        saved = state.get("optim") or []
        sync_state = saved[0].get(SEMI_SYNC_KEY) if saved else None
        if sync_state is not None:
            state = {**state, "optim": [{k: v for k, v in saved[0].items() if k != SEMI_SYNC_KEY}, *saved[1:]]}
        super().load_state_dict(module, optimizers, state, strict=strict)
        if sync_state is not None:
            _load_sync_state(self.quorum.manager, self._sync, sync_state)

    def teardown(self, *, failed: bool = False) -> None:
        sync = self._sync
        if sync is not None:
            sync.__exit__(None, None, None)  # removes torchft's hooks from the user's optimizer
            self._sync = None
        self._resuming = self._starting = self._joined = False
        super().teardown(failed=failed)


def _semi_sync(fault_tolerance: Any, quorum: ReplicaQuorum, module: nn.Module, inner: torch.optim.Optimizer) -> Any:
    """torchft's LocalSGD or DiLoCo over ``module``'s parameters, driven by ``inner``'s step hooks."""
    import_torchft()  # the error saying how to install it, if it is missing
    from torchft import local_sgd

    every = fault_tolerance.sync_every
    if fault_tolerance.sync == "local_sgd":
        return local_sgd.LocalSGD(quorum.manager, module, inner, sync_every=every)
    factory = outer_optimizer_factory(fault_tolerance)
    if fault_tolerance.fragments == 1:
        return local_sgd.DiLoCo(quorum.manager, [module], inner, factory(module.parameters()), sync_every=every)
    fragments = model_fragments(checkpoints.unwrap(module), fault_tolerance.fragments)
    # torchft syncs fragment (its step count % fragments); trainmesh's start quorum is step 1, so the
    # list is turned by one for fragment 0 to be synced first, as in torchft's own loop (from step 0).
    fragments = fragments[-1:] + fragments[:-1]
    outers = [factory(fragment.parameters()) for fragment in fragments]  # one per fragment, as torchtitan builds
    return local_sgd.DiLoCo(quorum.manager, fragments, inner, outers, sync_every=every)


# What of torchft 0.2's LocalSGD / DiLoCo a group joining a run, and a resume, use besides their public
# calls (torchft has no public call for a sync after a quorum already started, nor for the local step).
_TORCHFT_INTERNALS = {
    "LocalSGD": ("_perform_sync", "_local_step", "_manager"),
    "DiLoCo": ("_fragments", "_current_fragment", "_local_step", "_save_parameters", "_manager"),
}


def _is_diloco(sync: Any) -> bool:
    from torchft import local_sgd

    return isinstance(sync, local_sgd.DiLoCo)


def check_torchft_internals(sync: Any) -> None:
    """Refuse, before training, a torchft whose LocalSGD / DiLoCo lack what a rejoin or a resume uses:
    without them a restarted group would take part in a sync it cannot make, or a resume would miss the
    state between syncs."""
    kind = "DiLoCo" if _is_diloco(sync) else "LocalSGD"
    missing = [name for name in _TORCHFT_INTERNALS[kind] if not hasattr(sync, name)]
    if missing:
        import torchft

        raise RuntimeError(
            f"fault_tolerance: sync={kind!r} relies on torchft 0.2's {kind} ({', '.join(missing)}), which this "
            f"torchft ({getattr(torchft, '__version__', 'unknown version')}) does not have; install the torchft "
            f"trainmesh is tested with: {install_hint('fault-tolerance')}"
        )


def _sync_after_quorum(sync: Any) -> None:
    """The sync torchft 0.2's LocalSGD.sync / DiLoCo's step hook run after their start_quorum, for a
    group whose own quorum (before its first step) met the others in theirs: the weights (DiLoCo: the
    pseudo-gradient of the fragment due, then the outer step) averaged with them, committed or not as
    torchft decides, and the count of local steps restarted, as theirs is."""
    if not _is_diloco(sync):
        sync._perform_sync()
    else:
        fragment = sync._fragments[sync._current_fragment()]
        fragment.prepare_sync()
        fragment.perform_sync()
    sync._local_step = 0


def model_fragments(module: nn.Module, count: int) -> list[nn.Module]:
    """Streaming DiLoCo's fragments: the module's layers with parameters, in order (a ModuleList's or
    Sequential's items, and the inside of a module whose one layer holds every parameter, taken as
    layers), cut into ``count`` consecutive runs of about equal parameter counts (each a ModuleList
    of those layers; the user's module is not changed)."""
    layers = _layers(module, count)
    if len(layers) < count:
        raise ValueError(
            f"fault_tolerance with fragments={count}: {type(module).__name__} has {len(layers)} top-level layers "
            f"with parameters, fewer than the fragments; use fragments <= {len(layers)}"
        )
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    total, done = sum(sizes), 0
    fragments: list[nn.Module] = []
    current: list[nn.Module] = []
    for index, (layer, size) in enumerate(zip(layers, sizes)):
        current.append(layer)
        done += size
        left_layers, left_fragments = len(layers) - index - 1, count - len(fragments) - 1
        # Close a fragment at its share of the parameters, or when the layers left are just enough.
        if left_fragments and (done >= total * (len(fragments) + 1) / count or left_layers == left_fragments):
            fragments.append(nn.ModuleList(current))
            current = []
    fragments.append(nn.ModuleList(current))
    return fragments


def _layers(module: nn.Module, count: int) -> list[nn.Module]:
    if any(True for _ in module.parameters(recurse=False)):
        raise ValueError(
            f"fault_tolerance with fragments={count}: {type(module).__name__} holds parameters of its own (not in "
            "a layer), which no fragment would sync. Move them into a submodule, or use fragments=1"
        )
    holding = [child for child in module.children() if any(True for _ in child.parameters())]
    if len(holding) == 1 and not isinstance(holding[0], (nn.ModuleList, nn.Sequential)):
        return _layers(holding[0], count)  # a wrapper (a LightningModule's self.model): its layers
    layers: list[nn.Module] = []
    for child in holding:
        layers += _layers(child, count) if isinstance(child, (nn.ModuleList, nn.Sequential)) else [child]
    return layers


def _sync_state(fault_tolerance: Any, sync: Any) -> dict[str, Any]:
    """What continues a run between syncs: the local steps since the last one, torchft's step count,
    and every DiLoCo fragment's state as torchft saves it for a recovering peer (the weights of the
    last sync and the outer optimizer's state), copied: the fragment keeps changing them."""
    manager = sync._manager
    fragments = {
        key: copy.deepcopy(save())
        for key, save in manager._user_state_dicts.items()
        if key.startswith(_FRAGMENT_PREFIX)
    }
    return {
        "sync": fault_tolerance.sync,
        "sync_every": fault_tolerance.sync_every,
        # torchft counts the steps since the last sync on the LocalSGD / DiLoCo object, not in a state dict
        "local_step": sync._local_step,
        "manager": manager.state_dict(),
        "fragments": fragments,
        # Since 0.2's rejoin, fragment i is saved under torchft's key of place i+1 (the list is turned by
        # one) and torchft's count starts at 1: a checkpoint without this mark has the older order.
        "fragment_order": _FRAGMENT_ORDER,
    }


def _load_sync_state(manager: Any, sync: Any, state: dict[str, Any]) -> None:
    manager.load_state_dict(state["manager"])
    sync._local_step = state["local_step"]
    for key, fragment in state["fragments"].items():
        manager._load_state_dict_fns[key](fragment)  # torchft's own load: weights of the last sync, outer state


def _check_same_sync(fault_tolerance: Any, saved: dict[str, Any], source: str) -> None:
    # DiLoCo's state is saved per fragment: another fragment count would load one fragment's weights of
    # the last sync and outer state into another.
    mine = (fault_tolerance.sync, fault_tolerance.sync_every, fault_tolerance.fragments)
    theirs = (saved["sync"], saved["sync_every"], len(saved.get("fragments", ())))
    if mine[0] == "diloco" and mine[2] > 1 and saved.get("fragment_order") != _FRAGMENT_ORDER:
        raise ValueError(
            f"fault_tolerance: {source} is a Streaming DiLoCo checkpoint written before trainmesh kept its "
            "fragments in the order a restarted group can rejoin by; its fragments' weights of the last sync "
            "and outer optimizer states would load into other fragments. Resume it with the trainmesh that "
            "wrote it, or start a new run from its model weights (Module.load_from_checkpoint)"
        )
    if theirs[:2] != mine[:2] or (mine[0] == "diloco" and theirs[2] != mine[2]):
        raise ValueError(
            f"fault_tolerance: {source} was written with {_settings(*theirs)}, and this run asks for "
            f"{_settings(*mine)}; the saved position inside the interval and state of the last sync belong to "
            "the first. Resume with the same sync, sync_every and fragments"
        )


def _settings(sync: str, every: int, fragments: int) -> str:
    return f"sync={sync!r}, sync_every={every}" + (f", fragments={fragments}" if sync == "diloco" else "")


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
