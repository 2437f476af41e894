"""Runtime: devices, precision and strategy for any training loop, the Trainer's included.

A user with a loop of their own (the keras-io seed's, say) gets multi-device training from a
handful of verbs, and the Trainer is built on exactly these verbs: there is one code path.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, ContextManager

import torch
from torch import nn

from trainmesh.accelerators import resolve_accelerator, resolve_devices
from trainmesh.launchers import Launcher, build_launcher
from trainmesh.precision import Precision
from trainmesh.strategies import build_strategy
from trainmesh.seed import SeedSettings, seed_settings, seed_worker
from trainmesh.strategies.rebind import ParameterMoves, rebind_optimizer
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.dataloaders import with_worker_init_fn


class Runtime:
    """Place a model, its optimizers and its data, and synchronise values across processes.

    >>> runtime = Runtime(accelerator="cpu", devices=1)
    >>> model = torch.nn.Linear(4, 1)
    >>> model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> loss = model(torch.ones(2, 4)).pow(2).mean()
    >>> runtime.backward(loss)
    >>> optimizer.step()
    """

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        strategy: str | Any = "auto",
        precision: str | int = "32-true",
        *,
        num_nodes: int = 1,
    ) -> None:
        if not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValueError(f"num_nodes={num_nodes!r} must be a positive integer")
        # Captured now, so that it travels with this object to the processes a spawn launcher
        # starts (they never ran the script's seed_everything).
        self.seed_settings: SeedSettings | None = seed_settings()
        self.device_type = resolve_accelerator(accelerator)
        self.device_indices = resolve_devices(self.device_type, devices)
        self.num_nodes = num_nodes
        self.precision = Precision(precision, device_type=self.device_type)
        self.strategy = build_strategy(
            strategy,
            device_type=self.device_type,
            devices=self.device_indices,
            num_nodes=num_nodes,
            precision=self.precision,
        )
        self.launcher: Launcher = build_launcher(
            self.strategy.start_method, devices=self.strategy.processes_per_node, num_nodes=num_nodes
        )
        self._environment_ready = False
        self._parameter_moves: list[ParameterMoves] = []  # one per module placed

    # ---- processes --------------------------------------------------------------------------
    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the run's processes and call ``fn(*args, **kwargs)`` in each, set up."""
        return self.launcher.launch(self._run_in_worker, fn, *args, **kwargs)

    def _run_in_worker(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.setup_environment()
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            # Leave the process group now, so that peers blocked on this process fail fast
            # instead of waiting for a collective that will never complete.
            self.strategy.teardown(failed=True)
            self._environment_ready = False
            raise
        if self.strategy.process.reports_to_parent:
            self.teardown()  # a spawned worker ends with this call: leave its group cleanly
        return result

    def setup_environment(self) -> None:
        """Join the process group and claim a device; idempotent."""
        if not self._environment_ready:
            self.strategy.setup_environment(self.launcher.process_info())
            self._environment_ready = True

    @property
    def global_rank(self) -> int:
        return self.strategy.process.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.process.local_rank

    @property
    def node_rank(self) -> int:
        return self.strategy.process.node_rank

    @property
    def world_size(self) -> int:
        return self.strategy.process.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.process.global_rank == 0

    @property
    def device(self) -> torch.device:
        return self.strategy.root_device

    # ---- model, optimizers, data ------------------------------------------------------------
    def setup(self, module: nn.Module, *optimizers: torch.optim.Optimizer) -> Any:
        """Place ``module`` (and wrap it as the strategy needs) and wrap the optimizers so that
        ``optimizer.step()`` applies loss scaling. Returns the module, or (module, *optimizers).
        """
        self.setup_environment()
        placed = self.setup_module(module)
        if not optimizers:
            return placed
        return (placed, *self.setup_optimizers(*optimizers))

    def setup_module(self, module: nn.Module) -> nn.Module:
        self.setup_environment()
        moves = ParameterMoves(module)
        placed = self.strategy.setup_module(module)
        moves.record_placement(module)
        self._parameter_moves.append(moves)
        return placed

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> list[RuntimeOptimizer]:
        """Wrap the optimizers for the strategy; one built before ``setup_module`` (over the
        parameters the strategy then replaced, as fsdp does) is pointed at the new ones."""
        self.setup_environment()
        for optimizer in optimizers:
            for moves in self._parameter_moves:
                rebind_optimizer(_inner(optimizer), moves)
        prepared = self.strategy.setup_optimizers(optimizers)
        return [RuntimeOptimizer(opt, self) for opt in prepared]

    def setup_dataloaders(self, *loaders: Any, train: bool = True) -> Any:
        """Add what the strategy needs (a distributed sampler) and move batches to the device.

        After ``seed_everything(seed, workers=True)``, a loader with workers and no
        ``worker_init_fn`` of its own gets one that seeds each worker from the seed, this
        process's rank, the worker id and the loader's base seed (:func:`trainmesh.seed.seed_worker`).
        """
        self.setup_environment()
        # This process's latest seed_everything wins (it may have come after this Runtime was
        # built); a spawned process never ran one and has the settings captured in __init__.
        settings = seed_settings() or self.seed_settings
        seed = settings.seed if settings is not None else 0
        if train and self.world_size > 1:
            # Every process must shuffle with one seed, or the shards overlap and miss samples
            # (a script seeded per rank, say): rank 0's wins.
            seed = self.strategy.broadcast(seed, 0)
        wrapped = []
        for loader in loaders:
            if settings is not None and settings.workers:
                loader = with_worker_init_fn(loader, functools.partial(seed_worker, seed=settings.seed, rank=self.global_rank))
            wrapped.append(DeviceDataLoader(self.strategy.process_dataloader(loader, train=train, seed=seed), self.strategy))
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def to_device(self, data: Any) -> Any:
        return self.strategy.batch_to_device(data)

    # ---- the step ---------------------------------------------------------------------------
    def autocast(self) -> ContextManager[Any]:
        """Run the forward pass in the precision's compute dtype (a no-op in full precision)."""
        return self.precision.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        self.strategy.backward(self.precision.scale_loss(loss))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        inner = optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
        return self.precision.optimizer_step(inner, closure)

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> ContextManager[Any]:
        """Inside this context, ``backward`` accumulates gradients without synchronising them."""
        return self.strategy.no_backward_sync(module) if enabled else contextlib.nullcontext()

    def clip_gradients(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        max_norm: float | None = None,
        clip_val: float | None = None,
        norm_type: float = 2.0,
    ) -> torch.Tensor | None:
        """Clip by global norm (``max_norm``) or by value (``clip_val``); returns the norm."""
        if (max_norm is None) == (clip_val is None):
            raise ValueError("clip_gradients needs exactly one of max_norm= or clip_val=")
        inner = optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
        self.precision.unscale_gradients(inner)
        if max_norm is not None:
            return self.strategy.clip_gradients(module, max_norm, norm_type)
        self.strategy.clip_gradients_by_value(module, clip_val)
        return None

    # ---- collectives ------------------------------------------------------------------------
    def all_reduce(self, value: Any, op: str = "mean") -> Any:
        """Reduce tensors (or numbers) across processes; every process gets the result."""
        def reduce_one(tensor: torch.Tensor) -> torch.Tensor:
            return self.strategy.reduce(tensor, op)

        if isinstance(value, (int, float)):
            return reduce_one(torch.tensor(float(value), device=self.device)).item()
        return apply_to_tensors(value, reduce_one)

    def all_gather(self, value: Any) -> Any:
        return self.strategy.all_gather(value)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self.strategy.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        self.strategy.barrier(name)

    # ---- checkpoints ------------------------------------------------------------------------
    def save(self, path: str, state: dict[str, Any]) -> None:
        """Save ``state``: modules and optimizers in it are saved as state dicts, the rest as is.

        >>> # runtime.save("ckpt.pt", {"model": model, "optimizer": optimizer, "step": 10})
        """
        self.strategy.save_checkpoint(self.state_to_checkpoint(state), path)

    def load(self, path: str, state: dict[str, Any] | None = None, *, strict: bool = True) -> dict[str, Any]:
        """Load ``path`` into the modules and optimizers of ``state`` in place.

        Returns the entries of the checkpoint that were not loaded into an object.
        """
        checkpoint = self.strategy.load_checkpoint(path)
        return self.restore_from_checkpoint(checkpoint, state or {}, strict=strict)

    def state_to_checkpoint(self, state: dict[str, Any]) -> dict[str, Any]:
        converted: dict[str, Any] = {}
        for key, value in state.items():
            if isinstance(value, nn.Module):
                converted[key] = self.strategy.module_state_dict(value)
            elif isinstance(value, (torch.optim.Optimizer, RuntimeOptimizer)):
                converted[key] = self.strategy.optimizer_state_dict(_inner(value))
            elif hasattr(value, "state_dict") and callable(value.state_dict):
                converted[key] = value.state_dict()
            else:
                converted[key] = value
        return converted

    def restore_from_checkpoint(self, checkpoint: dict[str, Any], state: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
        missing = [key for key in state if key not in checkpoint]
        if missing and strict:
            raise KeyError(f"the checkpoint has no entries {missing}; it holds {sorted(checkpoint)}")
        for key, target in state.items():
            if key not in checkpoint:
                continue
            value = checkpoint[key]
            if isinstance(target, nn.Module):
                self.strategy.load_module_state_dict(target, value, strict=strict)
            elif isinstance(target, (torch.optim.Optimizer, RuntimeOptimizer)):
                self.strategy.load_optimizer_state_dict(_inner(target), value)
            elif hasattr(target, "load_state_dict") and callable(target.load_state_dict):
                target.load_state_dict(value)
            else:
                state[key] = value
        return {key: value for key, value in checkpoint.items() if key not in state}

    def teardown(self) -> None:
        self.strategy.teardown(failed=False)
        self._environment_ready = False


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer


class RuntimeOptimizer:
    """An optimizer whose ``step()`` goes through the precision's loss scaler.

    Every other attribute (``param_groups``, ``zero_grad``, ``state_dict``) is the wrapped
    optimizer's own.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, runtime: Runtime) -> None:
        self.optimizer = optimizer
        self._runtime = runtime

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return self._runtime.optimizer_step(self.optimizer, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"RuntimeOptimizer({self.optimizer!r})"


class DeviceDataLoader:
    """Iterates a loader and hands out batches already on the strategy's device."""

    def __init__(self, loader: Any, strategy: Any) -> None:
        self.loader = loader
        self._strategy = strategy

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        # Start the loader's iterator now, not at the first next(): samplers draw their
        # shuffle seed from the global RNG when it starts, and an exact resume depends on
        # when that draw happens.
        return self._moved(iter(self.loader))

    def _moved(self, iterator: Iterator[Any]) -> Iterator[Any]:
        to_device = self._strategy.batch_to_device
        for batch in iterator:
            yield to_device(batch)

    def skipping(self, batches: int) -> DeviceDataLoader:
        """The same loader starting ``batches`` into its next epoch (a mid-epoch resume)."""
        from trainmesh.utilities.dataloaders import skip_batches

        return DeviceDataLoader(skip_batches(self.loader, batches), self._strategy)

    def set_epoch(self, epoch: int) -> None:
        """Tell a distributed or epoch-aware sampler which epoch starts (it seeds the shuffle)."""
        for holder in (getattr(self.loader, "sampler", None), getattr(getattr(self.loader, "batch_sampler", None), "sampler", None)):
            if holder is not None and hasattr(holder, "set_epoch"):
                holder.set_epoch(epoch)
                return

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
