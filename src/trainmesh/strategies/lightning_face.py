"""The collectives and ranks Lightning's programs call on ``trainer.strategy`` (``world_size``,
``reduce``, ``barrier``, ``broadcast``, ``all_gather``, ``reduce_boolean_decision``), as Lightning
2.6's strategies answer them: on one process without a process group every call returns its input;
over processes they act on every data-parallel process (Lightning's DDP world).

A base class of the single-device and distributed strategies; it reads only their ``mesh`` and
``root_device``, and adds nothing to the Strategy protocol the Runtime uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from trainmesh.strategies import collectives
from trainmesh.utilities.refusal import RefusedError

# Lightning's reduce_op spellings (a string, or torch's ReduceOp) -> collectives' ops.
_OPS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


def _op_name(reduce_op: Any) -> str:
    if reduce_op is None:
        return "mean"
    if isinstance(reduce_op, str):
        name = reduce_op.lower()
    else:  # torch's ReduceOp (ReduceOp.SUM, ...)
        name = str(getattr(reduce_op, "name", reduce_op)).rsplit(".", 1)[-1].lower()
    if name not in _OPS:
        raise ValueError(f"reduce_op={reduce_op!r}: use 'mean', 'sum', 'max' or 'min' (or torch's ReduceOp)")
    return _OPS[name]


def _has_group() -> bool:
    return dist.is_available() and dist.is_initialized()


class LightningStrategyFace:
    """Lightning's collectives and ranks on a strategy (``trainer.strategy.reduce(x, reduce_op="sum")``)."""

    # The Trainer whose run this strategy serves, as a weak reference (the strategy must not keep it alive).
    _served: Callable[[], Any] | None = None

    def serve(self, trainer_ref: Callable[[], Any]) -> None:
        """Let ``optimizers`` and ``lr_scheduler_configs`` below be the Trainer's that ``trainer_ref``
        (its ``weakref.ref``) returns (the Trainer calls it)."""
        self._served = trainer_ref

    def refuse_for_trainer(self) -> None:
        """Raise where the Trainer cannot run this strategy as built (the Trainer asks at its
        construction); every strategy it runs says nothing."""

    def _served_trainer(self) -> Any:
        return self._served() if self._served is not None else None

    def __getstate__(self) -> dict[str, Any]:
        # Without the Trainer's weak reference (it cannot be pickled): ddp_spawn pickles the Runtime and
        # its strategy after a program read ``trainer.strategy``; the worker's Trainer serves it again.
        state = dict(self.__dict__)
        state.pop("_served", None)
        return state

    # Lightning's strategy holds the run's optimizers and scheduler configs (its trainer.optimizers and
    # trainer.lr_scheduler_configs read them there), and programs replace them through it: a warmup
    # callback's ``trainer.strategy.lr_scheduler_configs = [LRSchedulerConfig(warmup, interval="step")]``.
    # trainmesh's are the Trainer's, so these are its members, read and written: the same objects
    # ``trainer.optimizers`` gives, and a write here is the schedulers the loop steps next.
    @property
    def lr_scheduler_configs(self) -> list[Any]:
        trainer = self._served_trainer()
        return [] if trainer is None else trainer.lr_scheduler_configs

    @lr_scheduler_configs.setter
    def lr_scheduler_configs(self, configs: list[Any]) -> None:
        self._writable_trainer("lr_scheduler_configs").lr_scheduler_configs = configs

    @property
    def optimizers(self) -> list[Any]:
        trainer = self._served_trainer()
        return [] if trainer is None else trainer.optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[Any]) -> None:
        self._writable_trainer("optimizers").optimizers = optimizers

    def _writable_trainer(self, name: str) -> Any:
        trainer = self._served_trainer()
        if trainer is None:
            raise RuntimeError(
                f"strategy.{name} = ...: this strategy serves no Trainer, so there is no run whose {name} "
                f"to set; set it through the Trainer's strategy (trainer.strategy.{name})"
            )
        return trainer

    # Lightning's two hooks for a strategy subclass that restores the optimizers' states itself
    # (restore_optimizer_states below calls them in a resumed fit, as Lightning's checkpoint connector).
    @property
    def lightning_restore_optimizer(self) -> bool:
        """False in a subclass that restores optimizer states itself: a resumed fit then loads none
        (the schedulers' states still)."""
        return True

    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Lightning's: the checkpoint's ``optimizer_states`` into the run's optimizers, in order."""
        for optimizer, state in zip(self.optimizers, checkpoint["optimizer_states"]):
            optimizer.load_state_dict(state)

    @property
    def mesh(self) -> Any:  # the strategy's (single.py, distributed.py)
        raise NotImplementedError

    @property
    def root_device(self) -> torch.device:
        raise NotImplementedError

    @property
    def world_size(self) -> int:
        """The number of processes (Lightning's ``strategy.world_size``)."""
        return int(self._planned_or_mesh().world_size)

    @property
    def global_rank(self) -> int:
        return int(self._planned_or_mesh().global_rank)

    def _planned_or_mesh(self) -> Any:
        # Before the run's processes are set up the mesh is one process's; the served Trainer then
        # knows the place its launcher plans (Lightning's strategy has its ranks from construction on).
        trainer = self._served_trainer()
        return trainer if trainer is not None and int(self.mesh.world_size) == 1 else self.mesh

    @property
    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", 0))

    @property
    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", 0)))

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    # Members of Lightning's ParallelStrategy that programs read: their own sampler's arguments
    # (``DistributedSampler(ds, **trainer.strategy.distributed_sampler_kwargs)``), the module a
    # callback holding only the strategy reaches, the node's devices. Each is the served Trainer's.
    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        trainer = self._served_trainer()
        return None if trainer is None else trainer.distributed_sampler_kwargs

    @property
    def lightning_module(self) -> Any:
        trainer = self._served_trainer()
        return None if trainer is None else trainer.lightning_module

    @property
    def parallel_devices(self) -> list[torch.device]:
        """One device per process on this node (Lightning's CPU accelerator lists ``cpu`` n times)."""
        trainer, device = self._served_trainer(), self.root_device
        if trainer is None:
            return [device]
        return [
            torch.device(device.type) if device.type == "cpu" else torch.device(device.type, i)
            for i in trainer.device_ids
        ]

    # Lightning's Strategy holds its plugins and the module it runs, and programs read them there
    # (``trainer.strategy.checkpoint_io.save_checkpoint(...)``, ``trainer.strategy.precision_plugin``,
    # ``trainer.strategy.model``: the DDP-wrapped module during fit, the LightningModule on one device).
    @property
    def checkpoint_io(self) -> Any:
        """The AsyncCheckpointIO given in ``plugins``, else a ``TorchCheckpointIO`` (Lightning's default)."""
        trainer = self._served_trainer()
        background = None if trainer is None else trainer.runtime.checkpoints.saves.background
        if background is not None:
            return background
        if "_checkpoint_io" not in self.__dict__:  # one object, as Lightning's strategy holds
            from trainmesh.plugins.io import TorchCheckpointIO  # here: plugins is imported only when asked

            self.__dict__["_checkpoint_io"] = TorchCheckpointIO()
        return self.__dict__["_checkpoint_io"]

    def use_checkpoint_io(self, checkpoint_io: Any) -> None:
        """The ``TorchCheckpointIO`` a program passed in ``plugins``: the one ``checkpoint_io`` gives."""
        self.__dict__["_checkpoint_io"] = checkpoint_io

    @property
    def precision_plugin(self) -> Any:
        trainer = self._served_trainer()
        return None if trainer is None else trainer.precision_plugin

    @property
    def accelerator(self) -> Any:
        trainer = self._served_trainer()
        return None if trainer is None else trainer.accelerator

    @property
    def model(self) -> Any:
        """The module the run steps (a ``DistributedDataParallel`` under ddp); None before a stage."""
        trainer = self._served_trainer()
        return None if trainer is None else trainer.model

    def barrier(self, name: str | None = None) -> None:
        """Wait for every process (nothing on one)."""
        collectives.barrier(self.mesh)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Global rank ``src``'s ``obj`` (any picklable object) on every process."""
        return collectives.broadcast(self.mesh, obj, src)

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """``tensor`` reduced over the processes (``"mean"``, ``"sum"``, ``"max"``, ``"min"``) in place
        and returned, as Lightning's DDP ``reduce`` (its ``_sync_ddp``): the caller's tensor, and any
        tensor sharing its storage (``loss.detach()``'s ``loss``), holds the result; an integer
        mean is truncated into it. Anything else, or one process without a group, as it is."""
        op = _op_name(reduce_op)
        if not isinstance(tensor, torch.Tensor) or not _has_group() or self.world_size == 1:
            return tensor
        return collectives.reduce_in_place(self.mesh, tensor, op, group=group)

    def all_gather(self, tensor: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every process's tensor stacked on a new dim 0 (as it is without a process group), as
        ``LightningModule.all_gather``."""
        if not _has_group():
            return tensor
        return collectives.all_gather(self.mesh, tensor, group=group, sync_grads=sync_grads)

    def optimizer_step(self, optimizer: Any, *args: Any, model: Any = None, **kwargs: Any) -> Any:
        """Lightning's ``Strategy.optimizer_step(optimizer, closure, model=None, **kwargs)`` (1.x's:
        ``(optimizer, opt_idx, closure, ...)``), which a 1.x ``optimizer_step`` override calls after
        its warm-up instead of ``optimizer.step(closure=...)``: the step of the optimizer that
        ``optimizer_step`` received, its closure followed by the step hooks, as Lightning's precision
        plugin runs it. ``model`` is the run's module here (the only one Lightning would take)."""
        closure = kwargs.pop("closure", None)
        kwargs.pop("opt_idx", None)
        if args and callable(args[-1]):
            closure = args[-1]
        elif len(args) > 1:  # 1.x: (opt_idx, closure) with a closure of None
            closure = args[1]
        strategy_step = getattr(type(optimizer), "_tm_strategy_step", None)
        if strategy_step is None:
            raise RefusedError(
                f"trainer.strategy.optimizer_step got a {type(optimizer).__name__} that is not the run's: "
                "trainmesh steps, with its hooks, the optimizer that optimizer_step receives (or "
                "self.optimizers() gives); pass that one, or call optimizer.step(closure=...) on it"
            )
        return strategy_step(optimizer, closure, **kwargs)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002  Lightning's name
        """True when every process decided True (``all``), or any did (``all=False``)."""
        if not _has_group() or self.world_size == 1:
            return bool(decision)
        votes = collectives.reduce(self.mesh, torch.tensor(int(decision), device=self.root_device), "sum")
        return bool(votes == self.world_size) if all else bool(votes > 0)


def restore_optimizer_states(strategy: Any, checkpoint: Mapping[str, Any], own_restore: Callable[[], None]) -> None:
    """A resumed fit's optimizer states, as Lightning restores them: none where the strategy's
    ``lightning_restore_optimizer`` is False, through a subclass's own ``load_optimizer_state_dict``
    where it overrides it, else ``own_restore`` (trainmesh's: full tensors or shards)."""
    if not getattr(strategy, "lightning_restore_optimizer", True):
        return
    loader = getattr(type(strategy), "load_optimizer_state_dict", None)
    if loader is not None and loader is not LightningStrategyFace.load_optimizer_state_dict:
        strategy.load_optimizer_state_dict(checkpoint)
        return
    own_restore()


def serving(strategy: Any, trainer_ref: Callable[[], Any]) -> Any:
    """``strategy``, its ``optimizers`` and ``lr_scheduler_configs`` now the Trainer's that ``trainer_ref``
    returns (``Trainer.strategy``: a strategy that is no LightningStrategyFace is returned as it is)."""
    if isinstance(strategy, LightningStrategyFace):
        strategy.serve(trainer_ref)
    return strategy


__all__ = ["LightningStrategyFace", "restore_optimizer_states", "serving"]


class AcceleratorConnectorView:
    """What programs read of Lightning's private ``trainer._accelerator_connector``: ``is_distributed``
    (True for a strategy that joins processes in a process group, as Lightning's DDP, FSDP and
    ModelParallel strategies; lightning-bolts' ``SSLOnlineEvaluator`` asks it), ``strategy``."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    @property
    def is_distributed(self) -> bool:
        # as Lightning's: its own distributed classes, else the strategy's is_distributed, else False
        return bool(getattr(self.strategy, "is_distributed", False))
