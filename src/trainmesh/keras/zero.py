"""``strategy="zero1"`` for Keras: each process keeps Keras' optimizer state for its part of the variables.

As torch's ZeroRedundancyOptimizer partitions a torch optimizer's state, each process owns a
part of the trainable variables (balanced by size, the same on every process) and its Keras
optimizer is built on those only, so Keras creates slots (momentums, velocities, ...) for them
only. Every step, after the gradient all_reduce (sync.py), each process calls Keras' own
``optimizer.apply`` on its variables, which updates them (weight decay, constraints and the
schedule's learning rate as in one process: ``iterations`` counts every step on every process),
then each variable is broadcast from its owner, one collective per owner and bucket.

Keras builds the optimizer on every variable before training begins; when it begins (after
rank 0's variables reach every process) the state is re-built on the process's own part, keeping
its values. When ``fit`` ends the parts are gathered back: every process ends with the whole
state, so the model saves (``model.save``) and trains again (a second ``fit``) as under ddp.
``ModelCheckpoint`` and ``BackupAndRestore`` write during ``fit``: before each save they may make
(:func:`gather_for_savers`) the parts are gathered too, so that rank 0 writes the whole state, the
file one process writes; the state is split again when the next batch begins.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trainmesh.keras.backend import require_keras
from trainmesh.keras.callbacks import as_list, checkpoint_writers
from trainmesh.keras.collectives import assign, broadcast_from
from trainmesh.keras.optimizers import own_overrides
from trainmesh.keras.routes import on_optimizer
from trainmesh.runtime import Runtime


def owners_by_size(sizes: Sequence[int], world: int) -> list[int]:
    """The owning rank of each variable: largest first, each to the least loaded rank (ties: lowest)."""
    owners = [0] * len(sizes)
    loads = [0] * world
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        owners[index] = rank
        loads[rank] += sizes[index]
    return owners


def _kept_variables(optimizer: Any) -> list[Any]:
    """The optimizer's variables that do not belong to any model variable: the step count and
    the learning rate (a variable unless it is a schedule)."""
    kept = [optimizer._iterations]
    if isinstance(optimizer._learning_rate, require_keras().Variable):
        kept.append(optimizer._learning_rate)
    return kept


def rebuild(optimizer: Any, variables: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Keras' optimizer built again on ``variables`` (new, zero slots); each slot with its model variable.

    Keras' ``build`` creates each slot with ``add_variable_from_reference``: watching that call (Keras'
    method, routed for ``optimizer``: routes.py) is how every optimizer's slots are found, whatever it
    names them."""
    kept = _kept_variables(optimizer)
    optimizer._variables[:] = [v for v in optimizer._variables if any(v is k for k in kept)]
    optimizer._trainable_variables_indices = {}
    optimizer._trainable_variables = []
    optimizer.built = False
    made: list[tuple[Any, Any]] = []

    def add_from_reference(
        keras_add: Callable[..., Any], reference_variable: Any, name: Any = None, initializer: Any = "zeros"
    ) -> Any:
        slot = keras_add(reference_variable, name=name, initializer=initializer)
        made.append((slot, reference_variable))
        return slot

    with on_optimizer("add_variable_from_reference", optimizer, add_from_reference):  # Keras' class, not the user's
        optimizer.build(list(variables))
    return made


class Zero:
    """One process's part of the optimizer state during one ``fit``."""

    def __init__(self, runtime: Runtime, model: Any) -> None:
        self.runtime, self.model = runtime, model
        self.variables: list[Any] = []  # the trainable variables, in Keras' order
        self.owned: list[list[Any]] = []  # per rank, the variables it updates
        self.mine: set[int] = set()
        self.slots: list[tuple[Any, Any]] = []  # (slot, model variable) of this process's part
        self.partitioned = False

    def partition(self) -> None:
        """The optimizer's state re-built on this process's variables (values kept). Called on
        every process when training begins, once every process holds rank 0's state."""
        optimizer, world, rank = self.model.optimizer, self.runtime.world_size, self.runtime.global_rank
        self.variables = list(self.model.trainable_weights)
        owners = owners_by_size([int(v.value.numel()) for v in self.variables], world)
        self.owned = [[v for v, o in zip(self.variables, owners, strict=True) if o == r] for r in range(world)]
        self.mine = {id(v) for v in self.owned[rank]}
        values = [v.value.detach().clone() for v in optimizer.variables if not _is_kept(optimizer, v)]
        full = rebuild(optimizer, self.variables)  # the same slots as Keras built, in its order: now labelled
        assign([slot for slot, _ in full], values)
        own = by_variable([(slot, ref) for slot, ref in full if id(ref) in self.mine])
        self.slots = rebuild(optimizer, self.owned[rank])
        assign([slot for slot, _ in self.slots], in_order(self.slots, own))
        self.partitioned = True

    def apply(self, keras_apply: Callable[..., Any], gradients: Sequence[Any], variables: Sequence[Any]) -> None:
        """Keras' ``apply`` on this process's variables, then every variable from its owner."""
        pairs = [(g, v) for g, v in zip(gradients, variables, strict=True) if id(v) in self.mine and g is not None]
        if pairs:
            keras_apply([g for g, _ in pairs], [v for _, v in pairs])
        else:  # nothing of its own to update this step: the step is counted as Keras' apply counts it
            self.model.optimizer._iterations.assign_add(1)
        for owner, owned in enumerate(self.owned):
            self._from(owner, owned)

    def gather(self) -> None:
        """The whole state, on every process (the optimizer built on every variable again)."""
        if not self.partitioned:
            return
        optimizer, rank = self.model.optimizer, self.runtime.global_rank
        own = by_variable(self.slots)
        full = rebuild(optimizer, self.variables)
        for owner, owned in enumerate(self.owned):
            ids = {id(v) for v in owned}
            pairs = [(slot, ref) for slot, ref in full if id(ref) in ids]
            if owner == rank:
                assign([slot for slot, _ in pairs], in_order(pairs, own))
            self._from(owner, [slot for slot, _ in pairs])
        self.slots, self.partitioned = [], False

    def _from(self, owner: int, variables: Sequence[Any]) -> None:
        if not variables:
            return
        values = broadcast_from(self.runtime, [v.value for v in variables], owner)
        if owner != self.runtime.global_rank:
            assign(variables, values)


def by_variable(slots: Sequence[tuple[Any, Any]]) -> dict[int, list[torch.Tensor]]:
    """The values of each model variable's slots (keyed by the variable's id), in the order built."""
    values: dict[int, list[torch.Tensor]] = {}
    for slot, ref in slots:
        values.setdefault(id(ref), []).append(slot.value.detach().clone())
    return values


def in_order(slots: Sequence[tuple[Any, Any]], values: dict[int, list[torch.Tensor]]) -> list[torch.Tensor]:
    """``values`` for ``slots``: a variable's k-th slot takes its k-th value (Keras makes a variable's
    slots in the same order whatever else it builds, so the order across variables may differ)."""
    taken: dict[int, int] = {}
    result = []
    for _, ref in slots:
        k = taken.get(id(ref), 0)
        result.append(values[id(ref)][k])
        taken[id(ref)] = k + 1
    return result


def _is_kept(optimizer: Any, variable: Any) -> bool:
    return any(variable is k for k in _kept_variables(optimizer))


def refuse_unsupported(model: Any, fit_kwargs: dict[str, Any], world: int) -> None:
    """What zero1 cannot run, refused before any process starts."""
    optimizer = model.optimizer
    overrides = own_overrides(optimizer, ("finalize_variable_values",)) if world > 1 else []
    why = _unsupported_optimizer(optimizer) or (
        f"it overrides {overrides[0]}, which Keras calls when fit ends: trainmesh gathers the split state in Keras' "
        "own finalize_variable_values first, which an override may not reach, so it could read one process's part"
        if overrides
        else None
    )
    if why:
        raise ValueError(f"strategy='zero1' cannot train with {type(optimizer).__name__}: {why}. Use strategy='ddp'")
    built_on = list(optimizer._trainable_variables) if optimizer.built else list(model.trainable_weights)
    if len(built_on) != len(model.trainable_weights) or any(
        a is not b for a, b in zip(built_on, model.trainable_weights)
    ):
        raise ValueError(
            "strategy='zero1' splits the optimizer's state by the model's trainable variables, but the optimizer "
            "was built on other variables (trainable flags changed since it was built?). Compile the model again "
            "(a new optimizer), or use strategy='ddp'"
        )
    for callback in as_list(fit_kwargs.get("callbacks")):
        # Keras writes the optimizer's variables into .keras, .weights.h5 and Orbax checkpoints alike; the
        # whole state is gathered before ModelCheckpoint and BackupAndRestore save (gather_for_savers).
        if isinstance(callback, checkpoint_writers()) and not isinstance(callback, _savers()):
            raise ValueError(
                f"strategy='zero1' cannot run {type(callback).__name__}: it may write the optimizer state in the "
                "background, after the next step has split it over the processes again, so the file could hold "
                "rank 0's part only. Use keras.callbacks.ModelCheckpoint (the whole state is gathered before it "
                "saves), save the model after fit, or use strategy='ddp'"
            )


def _unsupported_optimizer(optimizer: Any) -> str | None:
    if getattr(optimizer, "global_clipnorm", None):
        return "global_clipnorm clips by the norm of every gradient, and each process applies its part only"
    if getattr(optimizer, "use_ema", False):
        return "use_ema overwrites every variable with its average from the whole optimizer state at fit's end"
    keras = require_keras()
    # Every variable its build makes must belong to one model variable (a slot); built on a scratch copy.
    scratch = type(optimizer).from_config(optimizer.get_config())
    before = len(scratch.variables)
    made = rebuild(scratch, [keras.Variable(torch.zeros(2), name="probe")])
    if len(scratch.variables) != before + len(made) or before != len(_kept_variables(scratch)):
        return "its state is not made of one slot per model variable, so it cannot be split by variable"
    return None


def _savers() -> tuple[type, ...]:
    callbacks = require_keras().callbacks
    return (callbacks.ModelCheckpoint, callbacks.BackupAndRestore)


def gather_for_savers(zero: Zero | None, given: Any) -> list[Any]:
    """A Keras callback to put first (before the user's): the whole optimizer state on every process
    at each epoch's end and each batch's end where a ``ModelCheckpoint`` or ``BackupAndRestore``
    among ``given`` saves; none without one. Only rank 0 runs the savers, so rank 0's list decides,
    on every process: under torchrun each process passes its own callbacks
    (``[ModelCheckpoint(...)] if rank == 0 else []``), and a gather rank 0 alone made would wait forever."""
    if zero is None:
        return []
    savers: list[Any] = [callback for callback in as_list(given) if isinstance(callback, _savers())]
    mine = (any(s.save_freq == "epoch" for s in savers), any(s.save_freq != "epoch" for s in savers))
    per_epoch, per_batch = zero.runtime.broadcast(mine, 0) if zero.runtime.world_size > 1 else mine
    if not (per_epoch or per_batch):
        return []
    return [_gathering(zero, savers, per_epoch=per_epoch, per_batch=per_batch)]


def _gathering(zero: Zero, savers: list[Any], *, per_epoch: bool, per_batch: bool) -> Any:
    batch_savers = [saver for saver in savers if saver.save_freq != "epoch"]  # rank 0's decide
    runtime = zero.runtime

    def saves_on_batch(batch: int) -> bool:
        # Only rank 0 runs the savers (callbacks.py): its decision, asked of a copy so that its counts
        # move only when the saver itself runs, reaches every process.
        will = runtime.global_rank == 0 and any(copy.copy(saver)._should_save_on_batch(batch) for saver in batch_savers)
        return bool(runtime.broadcast(will, 0))

    class GatherForSavers(require_keras().callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if per_batch and saves_on_batch(batch):
                zero.gather()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if per_epoch:
                zero.gather()

    return GatherForSavers()
