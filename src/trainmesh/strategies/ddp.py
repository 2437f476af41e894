"""DistributedDataParallel: one process per device, each on its shard of the data, gradients
averaged by DDP's bucketed all-reduce during backward."""

from __future__ import annotations

import atexit
import contextlib
import copy
import inspect
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ContextManager

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

from trainmesh.accelerators import device_for
from trainmesh.checkpoint.distributed import is_distributed_checkpoint, load_distributed
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.launchers.base import ProcessInfo
from trainmesh.precision import Precision
from trainmesh.strategies.data_parallel_ops import mean_loss, run_chunked_step
from trainmesh.strategies.step_dispatch import StepCall, StepDispatcher
from trainmesh.utilities.collections import apply_to_tensors, move_to_device
from trainmesh.utilities.dataloaders import replace_batch_sampler
from trainmesh.utilities.distributed_samplers import (
    ContiguousBatchShard,
    ContiguousShardSampler,
    DistributedSamplerWrapper,
    EqualLengthLoader,
    is_padding,
)

if TYPE_CHECKING:  # importing it pulls in DTensor and sympy (about a second): only zero1 needs it
    from torch.distributed.optim import ZeroRedundancyOptimizer

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class DDPStrategy:
    """``Trainer(strategy=DDPStrategy(find_unused_parameters=True))`` for DDP's options.

    With ``ddp2=True`` (``strategy="ddp2"``) there is one process per node instead of one per
    device: each step splits the node's batch across its devices as DataParallel does (so
    ``*_step_end`` sees the node's whole batch), and DDP averages gradients across nodes.

    >>> DDPStrategy(bucket_cap_mb=50).options["bucket_cap_mb"]
    50
    """

    inference_mode_safe = True

    def __init__(
        self,
        *,
        start_method: str = "elastic",
        ddp2: bool = False,
        shard_optimizer_state: bool = False,
        find_unused_parameters: bool = False,
        bucket_cap_mb: float | None = None,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        timeout: timedelta = timedelta(minutes=30),
        process_group_backend: str | None = None,
    ) -> None:
        if start_method not in ("elastic", "spawn", "fork"):
            raise ValueError(f"start_method={start_method!r}; use 'elastic' (ddp), 'spawn' or 'fork'")
        self.start_method = start_method
        self.ddp2 = ddp2
        # zero1: DDP with each rank keeping only its shard of the optimizer state (ZeRO stage 1).
        self.shard_optimizer_state = shard_optimizer_state
        self.name = "ddp2" if ddp2 else ("zero1" if shard_optimizer_state else "ddp")
        self.options = {"find_unused_parameters": find_unused_parameters, "bucket_cap_mb": bucket_cap_mb,
                        "gradient_as_bucket_view": gradient_as_bucket_view, "static_graph": static_graph}
        self.timeout = timeout
        self.process_group_backend = process_group_backend
        self.device_type, self.devices, self.num_nodes = "cpu", [0], 1
        self.precision: Precision = Precision("32-true", device_type="cpu")
        self._process = ProcessInfo()
        self._device = torch.device("cpu")
        self._owns_process_group = False
        self._module: nn.Module | None = None
        self._optimizers: list[torch.optim.Optimizer] = []

    def bind(self, *, device_type: str, devices: list[int], num_nodes: int, precision: Precision) -> DDPStrategy:
        """A copy of this strategy for the Runtime's devices and precision."""
        bound = copy.copy(self)
        bound.device_type, bound.devices, bound.num_nodes, bound.precision = device_type, list(devices), num_nodes, precision
        return bound

    @property
    def root_device(self) -> torch.device:
        return self._device

    @property
    def process(self) -> ProcessInfo:
        return self._process

    @property
    def processes_per_node(self) -> int:
        return 1 if self.ddp2 else len(self.devices)

    @property
    def _chunk_devices(self) -> list[torch.device] | None:
        """ddp2: the node's devices a batch is split across; None for plain ddp."""
        return [device_for(self.device_type, index) for index in self.devices] if self.ddp2 else None

    # ---- processes ----------------------------------------------------------------------------
    def setup_environment(self, process: ProcessInfo) -> None:
        self._process = process
        local_index = 0 if self.ddp2 else process.local_rank % len(self.devices)
        self._device = device_for(self.device_type, self.devices[local_index])
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        if dist.is_available() and dist.is_initialized():
            return  # the user (or a test harness) made the group; use it and leave it to them
        backend = self.process_group_backend or ("nccl" if self._device.type == "cuda" else "gloo")
        dist.init_process_group(
            backend, init_method=f"tcp://{process.master_addr}:{process.master_port}",
            rank=process.global_rank, world_size=process.world_size, timeout=self.timeout,
        )
        self._owns_process_group = True
        # Processes started to run a whole script end there; close the group on the way out.
        atexit.register(self.teardown)

    def teardown(self, *, failed: bool = False) -> None:
        if not (self._owns_process_group and dist.is_initialized()):
            return
        self._owns_process_group = False
        if not failed:  # after a failure, closing our connections is what unblocks waiting peers
            # Leave together: a rank that tears its group down while a peer still talks to the
            # rendezvous store can abort in gloo's threads.
            try:
                if dist.get_backend() == "gloo":
                    dist.monitored_barrier(timeout=timedelta(seconds=60))
                else:
                    dist.barrier()
            except RuntimeError:
                pass
        dist.destroy_process_group()
        # The group's worker threads outlive it (DDP and ZeroRedundancyOptimizer still hold it),
        # and one may not yet have freed the tensors of its last collective (zero1 broadcasts
        # parameters at every step). Freeing a tensor that Python can see takes the GIL, and a
        # thread that asks for it once the interpreter is finalizing aborts the process
        # ("terminate called without an active exception"; pytorch/pytorch#190489). Give them
        # the GIL and the CPU for a moment while the interpreter is whole.
        time.sleep(0.1)

    # ---- model and data -----------------------------------------------------------------------
    def module_init_context(self) -> ContextManager[Any]:
        """Where configure_model builds layers: here, on the real device (after setup_module)."""
        return contextlib.nullcontext()

    def setup_module(self, module: nn.Module) -> nn.Module:
        self._module = self.precision.convert_module(module.to(self._device))
        dispatcher = StepDispatcher(self._module, self._chunk_devices)
        # A module spread over several devices (ddp2 on GPUs) must not name device_ids.
        device_ids = [self._device.index] if self._device.type == "cuda" and not self.ddp2 else None
        configure_ddp = getattr(module, "configure_ddp", None)
        custom = configure_ddp(dispatcher, device_ids) if callable(configure_ddp) else None
        if custom is not None:
            return custom  # the seeds' "implement your own distributed training" hook
        return DistributedDataParallel(dispatcher, device_ids=device_ids, **self.options)

    def setup_optimizers(self, optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        if self.shard_optimizer_state:
            optimizers = [shard_optimizer_state(optimizer) for optimizer in optimizers]
        self._optimizers = list(optimizers)  # templates for loading a distributed checkpoint
        return list(optimizers)

    def process_dataloader(self, loader: Any, *, train: bool, seed: int) -> Any:
        if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
            return loader  # an iterable dataset shards itself (get_worker_info / rank)
        if _already_distributed(loader):
            return loader
        world, rank = self._process.world_size, self._process.global_rank
        if not train:
            sharded = _shard_for_evaluation(loader, world, rank)
            if sharded.batch_sampler is None:
                return sharded  # unbatched loaders have no empty batch to pad with
            return EqualLengthLoader(sharded, lambda n: int(self.reduce(torch.tensor(n, device=self._device), "max")))
        if len(loader.dataset) < world:
            raise ValueError(
                f"the training set has {len(loader.dataset)} sample(s) but there are {world} processes; "
                "every process needs at least one sample. Use fewer devices or more data"
            )
        sampler = loader.sampler
        if type(sampler) is SequentialSampler or _plain_shuffle(sampler):
            sharded: Any = DistributedSampler(loader.dataset, num_replicas=world, rank=rank,
                                              shuffle=type(sampler) is RandomSampler, seed=seed)
        else:
            sharded = DistributedSamplerWrapper(sampler, num_replicas=world, rank=rank)
        if loader.batch_sampler is None:
            return _with_sampler(loader, sharded)
        if type(loader.batch_sampler) is not BatchSampler:
            raise ValueError(
                f"the training DataLoader uses a custom batch_sampler ({type(loader.batch_sampler).__name__}), "
                "which trainmesh cannot split across processes; make it distributed yourself (it will be "
                "kept as it is), or use sampler= with batch_size="
            )
        batches = BatchSampler(sharded, loader.batch_sampler.batch_size, loader.batch_sampler.drop_last)
        return replace_batch_sampler(loader, batches)

    def batch_to_device(self, batch: Any) -> Any:
        if self._device.type == "cpu" and not self.precision.converts_input:
            return batch
        return self.precision.convert_input(move_to_device(batch, self._device, non_blocking=True))

    def run_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any) -> Any:
        if hook != "training_step":
            # Evaluation needs no gradient sync, and shards may differ in length by a batch:
            # going around DDP keeps per-batch collectives (buffer broadcasts) out of it.
            if self.ddp2:
                return run_chunked_step(self._module, hook, batch, (batch_idx, *extra), self._chunk_devices)
            return getattr(self._module, hook)(batch, batch_idx, *extra)
        try:
            return module(StepCall(hook), batch, batch_idx, *extra)
        except RuntimeError as err:
            if "find_unused_parameters" in str(err):
                raise RuntimeError(
                    "DDP found parameters that received no gradient in the last step (a branch not "
                    "taken, a frozen head). Use Trainer(strategy=DDPStrategy(find_unused_parameters=True)), "
                    f"or make every parameter take part in the loss.\nDDP said: {err}"
                ) from err
            raise

    def reduce_step_output(self, output: Any) -> Any:
        """ddp2 without ``training_step_end``: the loss is the mean over the node's chunks."""
        return mean_loss(output) if self.ddp2 else output

    # ---- the step -----------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def no_backward_sync(self, module: nn.Module) -> ContextManager[Any]:
        return module.no_sync()

    def clip_gradients(self, module: nn.Module, max_norm: float, norm_type: float) -> torch.Tensor:
        # After DDP's all-reduce every rank holds the same gradients, so the local norm is global.
        return torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm, norm_type=norm_type)

    def clip_gradients_by_value(self, module: nn.Module, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(module.parameters(), clip_value)

    # ---- collectives --------------------------------------------------------------------------
    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce op {op!r} is not known; use one of {sorted(_REDUCE_OPS)}")
        reduced = value.clone()
        dist.all_reduce(reduced, op=_REDUCE_OPS[op])
        return reduced / self._process.world_size if op == "mean" else reduced

    def all_gather(self, value: Any) -> Any:
        def gather(tensor: torch.Tensor) -> torch.Tensor:
            parts = [torch.empty_like(tensor) for _ in range(self._process.world_size)]
            dist.all_gather(parts, tensor.contiguous())
            return torch.stack(parts)

        return apply_to_tensors(value, gather)

    def collect_predictions(self, outputs: list[Any]) -> list[Any]:
        """Every rank's predictions, in rank order: the dataset's order, as shards are contiguous."""
        gathered: list[Any] = [None] * self._process.world_size
        cpu_outputs = apply_to_tensors([o for o in outputs if not is_padding(o)], lambda t: t.cpu())
        dist.all_gather_object(gathered, cpu_outputs)
        return [batch for part in gathered for batch in part]

    def barrier(self, name: str | None = None) -> None:
        if dist.is_initialized():  # e.g. the parent of ddp_spawn workers, after they ended
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not dist.is_initialized():
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=src)
        return holder[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """``obj`` from every rank, in rank order (small Python objects: RNG states, flags)."""
        if not dist.is_initialized():
            return [obj]
        gathered: list[Any] = [None] * self._process.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    # ---- checkpoints --------------------------------------------------------------------------
    def module_state_dict(self, module: nn.Module, *, sharded: bool = False) -> dict[str, Any]:
        return unwrap(module).state_dict()

    def load_module_state_dict(self, module: nn.Module, state: dict[str, Any], *, strict: bool = True) -> None:
        unwrap(module).load_state_dict(state, strict=strict)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer, *, sharded: bool = False) -> dict[str, Any]:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if isinstance(optimizer, ZeroRedundancyOptimizer):
            # Every rank sends its shard to rank 0, which holds the whole state for the file.
            optimizer.consolidate_state_dict(to=0)
            return optimizer.state_dict() if self._process.global_rank == 0 else {}
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str) -> None:
        if self._process.global_rank == 0:
            atomic_save(checkpoint, path)
        self.barrier()

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        if is_distributed_checkpoint(path):
            assert self._module is not None, "load a checkpoint after setup_module"
            return load_distributed(path, self._module, self._optimizers)
        return load_checkpoint_file(path, map_location=self._device)


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> ZeroRedundancyOptimizer:
    """The same optimizer (class, groups, options) with its state split across ranks."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    # ZeroRedundancyOptimizer builds each rank's optimizer as ``cls(groups, **defaults)``, but
    # ``defaults`` may hold keys ``__init__`` does not take (AdamW's decoupled_weight_decay):
    # pass only the ones it takes. Every key still reaches the groups, which carry them whole.
    accepted = _init_keywords(type(optimizer))
    defaults = {k: v for k, v in optimizer.defaults.items() if accepted is None or k in accepted}
    # Parameters that take no gradient (frozen layers; Keras' moving statistics and its integer
    # dropout seed) are left out: an optimizer never changes them, ZeRO requires one dtype, and
    # after each step it broadcasts every parameter from the rank owning it, which would put
    # another rank's moving statistics over this rank's. Groups stay, even empty (schedulers
    # count them).
    groups = [{**group, "params": [p for p in group["params"] if p.requires_grad]}  # with initial_lr
              for group in optimizer.param_groups]
    zero = ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), **defaults)
    zero.defaults = dict(optimizer.defaults)  # groups added later get every default, as in the original
    left_out = [p for group in optimizer.param_groups for p in group["params"] if not p.requires_grad]
    if left_out:
        step = zero.step

        def step_unless_unfrozen(*args: Any, **kwargs: Any) -> Any:
            _refuse_unfrozen(left_out)
            return step(*args, **kwargs)

        zero.step = step_unless_unfrozen  # type: ignore[method-assign]
    return zero


def _refuse_unfrozen(left_out: list[torch.Tensor]) -> None:
    """A parameter frozen when zero1 sharded the optimizer and trained since: it would never move."""
    unfrozen = [tuple(p.shape) for p in left_out if p.requires_grad and p.grad is not None]
    if unfrozen:
        raise RuntimeError(
            f"{len(unfrozen)} parameter(s) of shapes {unfrozen[:4]} did not require grad when strategy='zero1' "
            "sharded the optimizer, so they are not in it, and now they have gradients: they would never "
            "be updated. Add them with optimizer.add_param_group({'params': [...]}) when you unfreeze them, "
            "or unfreeze them before fit"
        )


def _init_keywords(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes; None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def _plain_shuffle(sampler: Any) -> bool:
    """A RandomSampler that DistributedSampler(shuffle=True) can stand in for without loss."""
    return (type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None
            and sampler.generator is None)


def _shard_for_evaluation(loader: DataLoader, world: int, rank: int) -> DataLoader:
    """Contiguous shards with no padding: every sample once, rank order = dataset order."""
    if loader.batch_sampler is None:
        order = None if type(loader.sampler) is SequentialSampler else loader.sampler
        return _with_sampler(loader, ContiguousShardSampler(loader.dataset, num_replicas=world, rank=rank, sampler=order))
    return replace_batch_sampler(loader, ContiguousBatchShard(loader.batch_sampler, num_replicas=world, rank=rank))


def _with_sampler(loader: DataLoader, sampler: Any) -> DataLoader:
    clone = copy.copy(loader)
    object.__setattr__(clone, "sampler", sampler)
    object.__setattr__(clone, "_iterator", None)
    return clone


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside DDP (or a configure_ddp wrapper) and the step dispatcher."""
    while not hasattr(module, "training_step") and isinstance(getattr(module, "module", None), nn.Module):
        module = module.module
    return module


def _already_distributed(loader: DataLoader) -> bool:
    samplers = [loader.sampler, getattr(loader.batch_sampler, "sampler", None), loader.batch_sampler]
    ours = (DistributedSampler, DistributedSamplerWrapper, ContiguousShardSampler, ContiguousBatchShard)
    return any(isinstance(s, ours) for s in samplers)
