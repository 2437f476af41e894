"""Lightning Fabric's ``Fabric``, a face over :class:`trainmesh.Runtime`.

A Fabric program (``fabric = L.Fabric(...); fabric.launch(); model, opt = fabric.setup(model, opt)``)
runs on trainmesh's Runtime: its strategies place the model, its launcher starts the processes
("ddp" runs the script again per device, "ddp_spawn" spawns ``launch(fn)``), its collectives and
checkpoint service do the rest. What this class adds is Fabric's: the wrappers (wrappers.py), the
precision's input/output casts (precision.py), callbacks, loggers, and Fabric's checks and words.
Members trainmesh cannot serve (DeepSpeed, XLA) are refused when the Fabric is built (arguments.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Generator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from trainmesh.fabric import checkpoints
from trainmesh.fabric.arguments import fabric_run_precision, fabric_runtime, fabric_strategy
from trainmesh.fabric.launching import Launching
from trainmesh.fabric.precision import FabricPrecision
from trainmesh.fabric.reductions import in_place, reduced_in_group
from trainmesh.fabric.wrappers import BackwardGate, _FabricDataLoader, _FabricModule, _FabricOptimizer, _unwrap_objects
from trainmesh.utilities.collections import apply_to_tensors, move_data_to_device
from trainmesh.utilities.lazy import is_instance


def _saved_form(obj: Any) -> Any:
    """What a checkpoint holds for ``obj``: the user's module for a set-up module (its names, no
    wrapper's), the optimizer for a set-up optimizer, the loader for a set-up loader."""
    return obj._original_module if isinstance(obj, _FabricModule) else _unwrap_objects(obj)


class Fabric(Launching):
    """Lightning Fabric's ``Fabric`` over trainmesh's Runtime: the same constructor and verbs.

    Args:
        accelerator: ``"auto"``, ``"cpu"``, ``"gpu"``/``"cuda"`` or ``"mps"`` (default ``'auto'``).
        strategy: ``"auto"``, ``"ddp"``, ``"ddp_spawn"``, ``"fsdp"`` or a strategy object (default ``'auto'``).
        devices: how many devices per node, which ones, or ``"auto"`` (default ``'auto'``).
        num_nodes: how many machines take part (default ``1``).
        precision: Fabric's precision flags: ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``,
            ``"bf16-true"``, ``"64-true"``; None is Fabric's default, ``"32-true"`` (default ``None``).
        plugins: a precision plugin (run as given, its scaler included), ``TorchCheckpointIO``, the cluster
            environment the process is in; a CheckpointIO of your own is refused, saying why (default ``None``).
        callbacks: objects whose methods ``call(hook_name, ...)`` runs (default ``None``).
        loggers: Fabric's loggers that ``log``/``log_dict`` write to (default ``None``).

    Examples:
        >>> import torch, trainmesh as tm
        >>> fabric = tm.Fabric(accelerator="cpu", devices=1)
        >>> model = torch.nn.Linear(2, 1)
        >>> model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        >>> fabric.world_size
        1
    """

    def __init__(
        self,
        *,
        accelerator: str | Any = "auto",
        strategy: str | Any = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: str | int | None = None,
        plugins: Any = None,
        callbacks: list[Any] | Any | None = None,
        loggers: Any = None,
    ) -> None:
        from trainmesh.accelerators import resolve_accelerator

        device_type = resolve_accelerator(accelerator)
        run_precision = fabric_run_precision(plugins, precision, device_type)
        self._runtime = fabric_runtime(
            device_type, devices, fabric_strategy(strategy, device_type), run_precision, num_nodes
        )
        self._precision = FabricPrecision(self._runtime.precision, plugin=getattr(run_precision, "plugin", None))
        callbacks = callbacks if callbacks is not None else []
        self._callbacks: list[Any] = callbacks if isinstance(callbacks, list) else [callbacks]
        loggers = loggers if loggers is not None else []
        self._loggers: list[Any] = loggers if isinstance(loggers, list) else [loggers]
        self._models_setup = 0
        super().__init__()

    # ---- where this process is --------------------------------------------------------------
    @property
    def accelerator(self) -> Any:
        from trainmesh import accelerators

        return {"cpu": accelerators.CPUAccelerator, "cuda": accelerators.CUDAAccelerator}.get(
            self._runtime.device_type, accelerators.Accelerator
        )()

    @property
    def strategy(self) -> Any:
        return self._runtime.strategy

    @property
    def device(self) -> torch.device:
        return self._runtime.device

    @property
    def global_rank(self) -> int:
        return self._runtime.global_rank

    @property
    def local_rank(self) -> int:
        return self._runtime.local_rank

    @property
    def node_rank(self) -> int:
        return self._runtime.node_rank

    @property
    def world_size(self) -> int:
        return self._runtime.world_size

    @property
    def is_global_zero(self) -> bool:
        return self._runtime.is_global_zero

    @property
    def loggers(self) -> list[Any]:
        return self._loggers

    @property
    def logger(self) -> Any:
        return self._loggers[0]

    # ---- model, optimizers, data ------------------------------------------------------------
    def setup(
        self, module: nn.Module, *optimizers: torch.optim.Optimizer, scheduler: Any = None, move_to_device: bool = True
    ) -> Any:
        """The module (and optimizers) set up for the strategy and precision, wrapped as Fabric's."""
        self._validate_launched()
        if isinstance(module, _FabricModule):
            raise ValueError("A model should be passed only once to the `setup` method.")
        if any(isinstance(opt, _FabricOptimizer) for opt in optimizers):
            raise ValueError("An optimizer should be passed only once to the `setup` method.")
        self._refuse_staying_put(move_to_device)
        wrapped = self._wrap_module(module)
        fabric_optimizers = self._wrapped_optimizers(optimizers)
        self._models_setup += 1
        if is_instance(module, "trainmesh.module", "Module"):  # Fabric's: self.optimizers() returns these
            module._fabric_optimizers = fabric_optimizers  # type: ignore[assignment]  # a Module attribute
        self.call("on_after_setup", fabric=self, module=wrapped)
        if fabric_optimizers:
            extra = (scheduler,) if scheduler is not None else ()
            return (wrapped, *fabric_optimizers, *extra)
        return wrapped

    def setup_module(self, module: nn.Module, move_to_device: bool = True) -> _FabricModule:
        self._validate_launched()
        if isinstance(module, _FabricModule):
            raise ValueError("A model should be passed only once to the `setup_module` method.")
        self._refuse_staying_put(move_to_device)
        wrapped = self._wrap_module(module)
        self._models_setup += 1
        return wrapped

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> Any:
        self._validate_launched()
        if not optimizers:
            raise ValueError("`setup_optimizers` requires at least one optimizer as input.")
        if any(isinstance(opt, _FabricOptimizer) for opt in optimizers):
            raise ValueError("An optimizer should be passed only once to the `setup_optimizers` method.")
        wrapped = self._wrapped_optimizers(optimizers)
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    def _wrapped_optimizers(self, optimizers: tuple[torch.optim.Optimizer, ...]) -> list[_FabricOptimizer]:
        return [
            _FabricOptimizer(opt, self._runtime, self._callbacks, self._precision) for opt in self._prepared(optimizers)
        ]

    def _wrap_module(self, module: nn.Module) -> _FabricModule:
        placed = self._runtime.setup_module(self._precision.convert_module(module))
        if is_instance(module, "trainmesh.module", "Module"):
            # Fabric's: self.log, self.trainer, manual_backward of a LightningModule go to this Fabric
            # (trainmesh.module_fabric), and its hooks are called by fabric.call like a callback's
            module._fabric = self  # type: ignore[assignment]  # a Module attribute, as Fabric sets it
            if module not in self._callbacks:
                self._callbacks.append(module)
        return _FabricModule(placed, self._precision, original_module=module)

    def _prepared(self, optimizers: tuple[torch.optim.Optimizer, ...]) -> list[torch.optim.Optimizer]:
        from trainmesh.runtime_optimizer import inner_optimizer

        if not optimizers:
            return []
        return [inner_optimizer(opt) for opt in self._runtime.setup_optimizers(*optimizers)]

    def _refuse_staying_put(self, move_to_device: bool) -> None:
        if not move_to_device and self._runtime.device.type != "cpu":
            raise ValueError(
                "setup(..., move_to_device=False): trainmesh's strategies place the module on this process's device "
                f"({self._runtime.device}) themselves; move it yourself after setup, or leave move_to_device=True"
            )

    def setup_dataloaders(
        self, *dataloaders: DataLoader[Any], use_distributed_sampler: bool = True, move_to_device: bool = True
    ) -> Any:
        """Each loader with a distributed sampler (rank r's share, as Fabric's), batches on the device."""
        self._validate_launched()
        if not dataloaders:
            raise ValueError("`setup_dataloaders` requires at least one dataloader as input.")
        if any(isinstance(dl, _FabricDataLoader) for dl in dataloaders):
            raise ValueError("A dataloader should be passed only once to the `setup_dataloaders` method.")
        if any(not isinstance(dl, DataLoader) for dl in dataloaders):
            raise TypeError("Only PyTorch DataLoader are currently supported in `setup_dataloaders`.")
        device = self.device if move_to_device else None
        wrapped = []
        for loader in dataloaders:
            distributed = self._runtime.setup_dataloaders(loader, distribute=use_distributed_sampler)
            wrapped.append(_FabricDataLoader(distributed.loader, device, distributed.set_epoch))
        return wrapped[0] if len(wrapped) == 1 else wrapped

    # ---- the step ---------------------------------------------------------------------------
    def backward(self, tensor: torch.Tensor, *args: Any, model: _FabricModule | None = None, **kwargs: Any) -> None:
        BackwardGate.inside = True
        try:
            module = model._forward_module if model is not None else None  # what Fabric's plugin hooks get
            self._precision.backward(self._runtime, tensor, module, *args, **kwargs)
        finally:
            BackwardGate.inside = False

    def clip_gradients(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> torch.Tensor | None:
        if clip_val is not None and max_norm is not None:
            raise ValueError(
                "Only one of `clip_val` or `max_norm` can be set as this specifies the underlying clipping algorithm!"
            )
        if clip_val is None and max_norm is None:
            raise ValueError("You have to specify either `clip_val` or `max_norm` to do gradient clipping!")
        inner = _unwrap_objects(optimizer)
        norm = self._runtime.clip_gradients(
            _unwrap_objects(module),
            inner,
            **self._precision.clip_options(inner),
            max_norm=max_norm,
            clip_val=clip_val,
            norm_type=norm_type,
        )
        if clip_val is not None:
            return None
        if error_if_nonfinite and norm is not None and not torch.isfinite(norm):
            raise RuntimeError(
                f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it cannot "
                "be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
                "`error_if_nonfinite=False`"
            )
        return norm

    def autocast(self) -> AbstractContextManager[Any]:
        return self._precision.forward_context()

    def no_backward_sync(self, module: _FabricModule, enabled: bool = True) -> AbstractContextManager[Any]:
        if not isinstance(module, _FabricModule):
            raise TypeError(
                "You need to set up the model first before you can call `fabric.no_backward_sync()`:"
                " `model = fabric.setup(model, ...)`"
            )
        if self.world_size == 1:
            return nullcontext()
        return self._runtime.no_backward_sync(module._forward_module, enabled)

    def to_device(self, obj: Any) -> Any:
        if isinstance(obj, nn.Module):
            return obj.to(self.device)
        return move_data_to_device(obj, self.device)

    def init_tensor(self) -> AbstractContextManager[Any]:
        return self._precision.tensor_init_context()

    def init_module(self, empty_init: bool | None = None) -> AbstractContextManager[Any]:
        """Build the module in the precision's dtype (and where the strategy shards, on the meta device);
        ``empty_init=True``: without ``torch.nn.init`` (for weights a checkpoint fills), as Fabric's, and on the
        meta device under Fabric's ``ModelParallelStrategy`` (its layers' ``reset_parameters`` run once placed)."""
        from trainmesh.utilities.empty_init import SkipInit

        self._validate_launched()
        on_meta = bool(empty_init) and getattr(self._runtime.strategy, "empty_init_on_meta", False)
        return _all(
            self._precision.module_init_context(),
            self._runtime.module_init_context(),
            torch.device("meta") if on_meta else nullcontext(),
            SkipInit(enabled=bool(empty_init)),
        )

    def sharded_model(self) -> AbstractContextManager[Any]:
        import warnings

        warnings.warn(
            "`Fabric.sharded_model()` is deprecated in favor of `Fabric.init_module()`.",
            DeprecationWarning,
            stacklevel=2,
        )
        self._validate_launched()
        return self._runtime.module_init_context()

    # ---- collectives ------------------------------------------------------------------------
    def _tensors(self, data: Any) -> Any:
        # Fabric's convert_to_tensors: numbers (anywhere in a collection) become tensors on the device,
        # with its dtypes (int32, float32, bool as uint8), numpy arrays too; tensors move there
        from trainmesh.utilities.apply_func import new_convert_to_tensors

        return new_convert_to_tensors(data, self.device)

    def all_reduce(self, data: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        self._validate_launched()
        op = str(getattr(reduce_op, "name", reduce_op) or "mean").lower().replace("avg", "mean")
        if group is not None:
            return apply_to_tensors(self._tensors(data), functools.partial(reduced_in_group, group=group, op=op))
        return apply_to_tensors(self._tensors(data), lambda t: in_place(t, self._runtime.all_reduce(t, op)))

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        self._validate_launched()
        return self._runtime.all_gather(self._tensors(data), group=group, sync_grads=sync_grads, stack_alone=False)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self._validate_launched()
        return self._runtime.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        self._validate_launched()
        self._runtime.barrier(name)

    @contextmanager
    def rank_zero_first(self, local: bool = False) -> Generator[None, None, None]:
        """Rank 0 (per node with ``local=True``) runs the block first, the others after it."""
        rank = self.local_rank if local else self.global_rank
        if rank > 0:
            self._runtime.barrier()
        yield
        if rank == 0:
            self._runtime.barrier()

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.local_rank == 0:
            print(*args, **kwargs)

    # ---- checkpoints --------------------------------------------------------------------------
    def save(
        self,
        path: str | os.PathLike[str],
        state: dict[str, Any],
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        checkpoints.check_filter(state, filter)
        checkpoints.save(self._runtime, path, {key: _saved_form(value) for key, value in state.items()}, filter)
        self.barrier()

    def load(
        self,
        path: str | os.PathLike[str],
        state: dict[str, Any] | None = None,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        unwrapped = {key: _saved_form(value) for key, value in state.items()} if state is not None else None
        remainder = checkpoints.load(self._runtime, path, unwrapped, strict=strict, weights_only=weights_only)
        self.barrier()
        if state is not None and unwrapped is not None:
            for key in list(unwrapped):  # plain values the checkpoint held, into the caller's dict (Fabric's)
                if not isinstance(state[key], (_FabricModule, _FabricOptimizer, _FabricDataLoader)):
                    state[key] = unwrapped[key]
        return remainder

    def load_raw(
        self,
        path: str | os.PathLike[str],
        obj: nn.Module | torch.optim.Optimizer,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> None:
        checkpoints.load(self._runtime, path, _saved_form(obj), strict=strict, weights_only=weights_only)

    # ---- callbacks, loggers, seed -------------------------------------------------------------
    def call(self, hook_name: str, *args: Any, **kwargs: Any) -> None:
        """Call ``hook_name`` on every callback that has it, with the keyword arguments it takes."""
        import warnings

        for callback in self._callbacks:
            method = getattr(callback, hook_name, None)
            if method is None:
                continue
            if not callable(method):
                warnings.warn(
                    f"Skipping the callback `{type(callback).__name__}.{hook_name}` because it is not callable.",
                    stacklevel=2,
                )
                continue
            method(*args, **_accepted_kwargs(method, kwargs))

    def log(self, name: str, value: Any, step: int | None = None) -> None:
        self.log_dict(metrics={name: value}, step=step)

    def log_dict(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        scalars = apply_to_tensors(dict(metrics), _scalar)
        for logger in self._loggers:
            logger.log_metrics(metrics=scalars, step=step)

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Fabric's: seed everything, the loaders' workers too unless ``workers=False``."""
        from trainmesh.seed import seed_everything

        return seed_everything(seed=seed, workers=True if workers is None else workers, verbose=verbose)


def _scalar(value: torch.Tensor) -> Any:
    """A logged tensor's number (Fabric's ``convert_tensors_to_scalars``, with its error)."""
    if value.numel() != 1:
        raise ValueError(
            f"The metric `{value}` does not contain a single element, thus it cannot be converted to a scalar."
        )
    return value.item()


def _accepted_kwargs(method: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Fabric's ``_filter_kwargs_for_callback``: the keyword arguments ``method`` takes (all with ``**kwargs``)."""
    try:
        parameters = inspect.signature(method).parameters
    except (ValueError, TypeError):
        return kwargs
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {name: value for name, value in kwargs.items() if name in parameters}


@contextmanager
def _all(*contexts: AbstractContextManager[Any]) -> Generator[None, None, None]:
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield
