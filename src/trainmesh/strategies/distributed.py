"""What every multi-process strategy shares: the process group, the mesh, sharded data,
checkpoints written by one process. The strategies built on it (``ddp.py``, ``fsdp.py``) add
how the model and optimizer are placed, and how a step runs through them."""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.writers import SYNCHRONOUS, CheckpointWriter
from trainmesh.launchers.base import ProcessInfo, ProcessPlan
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies import collectives
from trainmesh.strategies.arguments import new_keeping_arguments, rebuilt
from trainmesh.strategies.gradients import clip_gradients_locally
from trainmesh.strategies.lightning_face import LightningStrategyFace
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.process_group import join_process_group, leave_process_group
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.sampling import shard_dataloader

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

START_METHODS = ("elastic", "spawn", "fork", "forkserver")  # Lightning's "popen" is "elastic" (ddp.py)


class DistributedStrategy(LightningStrategyFace):
    """One process per device (``processes_per_node``), joined in one process group.

    Subclasses name their mesh (``dims``), place the model and state their ``capabilities``;
    their constructor arguments are kept (``init_arguments``) so that ``with_placement`` can
    build the same strategy for the run's devices.
    """

    # Lightning's DDP, FSDP and ModelParallel strategies answer True (its accelerator connector's
    # is_distributed reads it: published callbacks wrap their own modules in DDP then)
    is_distributed = True

    name = "distributed"

    # Lightning's banner as the group forms (process_group.py); trainmesh.keras' runs turn it off
    says_group_banner = True

    def __init__(
        self,
        *,
        start_method: str = "elastic",
        timeout: timedelta = timedelta(minutes=30),
        process_group_backend: str | None = None,
        placement: Placement | None = None,
    ) -> None:
        if start_method not in START_METHODS:
            raise ValueError(
                f"start_method={start_method!r}; use 'elastic' (ddp; Lightning's 'popen'), 'spawn', 'fork' or 'forkserver'"
            )
        self.start_method = start_method
        self.timeout = timeout
        self._process_group_backend = process_group_backend
        self.placement = placement or Placement()
        self.precision = self.placement.precision
        self._device = torch.device("cpu")
        self._mesh = ParallelMesh(ParallelDims().resolved(1))
        self._owns_process_group = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return new_keeping_arguments(cls, args, kwargs)

    def with_placement(self, placement: Placement) -> Any:
        return rebuilt(self, placement)

    @property
    def worker_environment(self) -> dict[str, str]:
        """Variables the workers need from their start (fsdp's huge pages on CPU): see ``processes``."""
        return {}

    @property
    def processes(self) -> ProcessPlan:
        return ProcessPlan(self.start_method, self.processes_per_node, self.worker_environment)

    @property
    def processes_per_node(self) -> int:
        return len(self.placement.devices)

    @property
    def process_group_backend(self) -> str | None:
        """The backend given, or once the processes joined, the one in use (``"gloo"`` on CPU), as
        Lightning's DDP strategy answers after its ``setup_environment``."""
        if self._process_group_backend is None and dist.is_available() and dist.is_initialized():
            return str(dist.get_backend())
        return self._process_group_backend

    @property
    def num_processes(self) -> int:
        """Lightning 2.6's name for the processes on each node (``len(parallel_devices)``), which
        programs divide their batch size by (the ImageNet example's ``setup``)."""
        return self.processes_per_node

    @property
    def root_device(self) -> torch.device:
        return self._device

    @property
    def cluster_environment(self) -> Any:
        """Where this process reads its place, as Lightning's ParallelStrategy holds it: SLURM's or
        torchrun's environment when they started the process, else ``LightningEnvironment`` (the
        processes trainmesh starts itself). ``.global_rank()``, ``.world_size()``, ``.main_address``..."""
        if "_cluster_environment" not in self.__dict__:  # one object, as Lightning's strategy holds
            from trainmesh.plugins.environments import running_environment  # here: only when asked

            self.__dict__["_cluster_environment"] = running_environment()
        return self.__dict__["_cluster_environment"]

    @property
    def launcher(self) -> Any:
        """What starts the processes (the served Trainer's; None for a strategy that serves none), with
        Lightning's ``is_interactive_compatible``: True only for forked workers (ddp_fork), as Lightning's
        ``_SubprocessScriptLauncher`` (ddp) and ``_MultiProcessingLauncher`` (ddp_spawn, ddp_fork) answer."""
        trainer = self._served_trainer()
        return None if trainer is None else trainer.runtime.launcher

    @property
    def _layer_sync(self) -> Any:
        """Lightning's private name of the layer sync plugin (``sync_batchnorm=True``'s ``TorchSyncBatchNorm``;
        None without), which programs read."""
        trainer = self._served_trainer()
        return None if trainer is None else trainer._layer_sync

    @property
    def _timeout(self) -> timedelta:
        """Lightning's private name of the process group's timeout, which programs read."""
        return self.timeout

    @property
    def mesh(self) -> ParallelMesh:
        return self._mesh

    @property
    def metrics_source(self) -> Any:
        return None  # every rank computes its loss and logs

    def dims(self, world_size: int) -> ParallelDims:
        """How this strategy divides ``world_size`` processes (resolved)."""
        return ParallelDims(dp_replicate=-1, dp_shard=1).resolved(world_size)

    def device_index(self, process: ProcessInfo) -> int:
        """Which of the node's devices this process drives."""
        return self.placement.devices[process.local_rank % len(self.placement.devices)]

    # ---- processes ----------------------------------------------------------------------------
    def setup_environment(self, process: ProcessInfo) -> None:
        dims = self.dims(process.world_size)  # a mesh that cannot be built fails before any group forms
        self._device = device_for(self.placement.device_type, self.device_index(process))
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        if join_process_group(
            process,
            self._device,
            backend=self._process_group_backend,
            timeout=self.timeout,
            banner=self.says_group_banner,
        ):
            self._owns_process_group = True
            # Processes started to run a whole script end there; close the group on the way out.
            atexit.register(self.teardown)
        self._mesh = ParallelMesh.build(
            dims, global_rank=process.global_rank, world_size=process.world_size, device_type=self._device.type
        )

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """No replica here recovers from a peer (that is fault_tolerance's strategy)."""

    def teardown(self, *, failed: bool = False) -> None:
        if self._owns_process_group:
            self._owns_process_group = False
            leave_process_group(failed=failed)

    # ---- model and data -----------------------------------------------------------------------
    def module_init_context(self) -> AbstractContextManager[Any]:
        """Where configure_model builds layers: here, on the real device (after setup_module)."""
        return contextlib.nullcontext()

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
        mesh = self._mesh
        sharded = shard_dataloader(
            loader,
            dp_rank=mesh.dp_rank,
            dp_size=mesh.dp_size,
            train=train,
            seed=seed,
            shuffle=shuffle,
            predict=predict,
            wrap_samplers=wrap_samplers,
        )
        return self._checked_loader(sharded, train=train)

    def _checked_loader(self, loader: Any, *, train: bool) -> Any:
        """The sharded loader, checked for what the strategy needs of it (a pipeline: whole microbatches)."""
        return loader

    def no_backward_sync(self, module: nn.Module) -> AbstractContextManager[Any]:
        return cast("DistributedDataParallel", module).no_sync()  # what setup_module wrapped it in

    @contextlib.contextmanager
    def block_backward_sync(self) -> Iterator[None]:
        """Lightning's ``ParallelStrategy.block_backward_sync()`` (a gradient-cache loop's backward on each
        chunk but the last): inside, a model the run wraps in DDP accumulates gradients locally, as
        ``LightningModule.no_backward_sync``; another's backward syncs as it would, as Lightning yields then."""
        from torch.nn.parallel import DistributedDataParallel

        trainer = self._served_trainer()
        model = None if trainer is None else trainer.model
        if not isinstance(model, DistributedDataParallel):
            yield
            return
        with trainer.runtime.no_backward_sync(model):
            yield

    def clip_gradients(
        self,
        module: nn.Module,
        parameters: Sequence[torch.Tensor],
        *,
        max_norm: float | None,
        clip_value: float | None,
        norm_type: float,
    ) -> torch.Tensor | None:
        # After DDP's all-reduce every rank holds the same gradients, so the local norm is global.
        return clip_gradients_locally(parameters, max_norm=max_norm, clip_value=clip_value, norm_type=norm_type)

    # ---- checkpoints --------------------------------------------------------------------------
    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        return checkpoints.plain_state_dict(module, optimizers)

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        checkpoints.load_plain_state_dict(module, optimizers, state, strict=strict)

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str,
        *,
        sharded: CheckpointKeys | None,
        writer: CheckpointWriter = SYNCHRONOUS,
    ) -> None:
        # Every rank holds the whole state: the first one writes, the others wait for the file.
        if self._mesh.global_rank == 0:
            writer.write_file(checkpoint, path)
        collectives.barrier(self._mesh)

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        return checkpoints.load(path, module, optimizers, keys=keys, map_location=self._device)
