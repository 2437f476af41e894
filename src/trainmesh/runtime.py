"""Runtime: devices, precision, strategy and mesh for any training loop, the Trainer's included.

A user with a loop of their own (the keras-io seed's, say) gets multi-device training from a
handful of verbs, and the Trainer is built on exactly these verbs: there is one code path.
The Trainer, callbacks and modules reach the strategy and the collectives only through here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.accelerators import resolve_accelerator, resolve_devices
from trainmesh.checkpoint.saves import CheckpointSaves
from trainmesh.launchers import Launcher
from trainmesh.launchers.base import ProcessInfo
from trainmesh.precision import Precision
from trainmesh.runtime_checkpoints import RuntimeCheckpoints
from trainmesh.runtime_choice import StrategyChoice
from trainmesh.runtime_optimizer import RuntimeOptimizer as RuntimeOptimizer  # re-exported
from trainmesh.runtime_optimizer import inner_optimizer, refuse_own_step_on_shards
from trainmesh.runtime_port import TrainerPort
from trainmesh.seed import SeedSettings, sampler_seed, seed_settings, seed_worker
from trainmesh.strategies import build_strategy, collectives
from trainmesh.strategies.capabilities import StrategyCapabilities
from trainmesh.strategies.compile import check_compiled, compile_options, uncompiled
from trainmesh.strategies.lightning_process_dataloader import process_dataloader
from trainmesh.strategies.materialize import builds_on_meta, refuse_meta_tensors
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.protocol import Strategy as Strategy  # re-exported: the type of trainer.strategy
from trainmesh.strategies.rebind import ParameterMoves, rebind_optimizer
from trainmesh.strategies.step import StepHooks, StepResult
from trainmesh.supervision import Supervision
from trainmesh.utilities import docstrings
from trainmesh.utilities.collections import apply_to_tensors, move_data_to_device
from trainmesh.utilities.dataloaders import with_worker_init_fn
from trainmesh.utilities.device_loader import BatchHooks, DeviceDataLoader, hooked_loader
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.process_group import process_group_exists

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)


class Runtime:
    __doc__ = docstrings.RUNTIME  # Args and Examples; the file is near 500 lines

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int | str | list[int] = "auto",
        strategy: str | Any = "auto",
        precision: str | int | Precision = "32-true",
        *,
        num_nodes: int = 1,
        max_restarts: int = 0,
        compile: bool | dict[str, Any] | None = False,
        fault_tolerance: Any = None,
    ) -> None:
        if not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValueError(f"num_nodes={num_nodes!r} must be a positive integer")
        # Captured now, so that it travels with this object to the processes a spawn launcher
        # starts (they never ran the script's seed_everything).
        self.seed_settings: SeedSettings | None = seed_settings()
        self.device_type = resolve_accelerator(accelerator)
        self.device_indices = resolve_devices(self.device_type, devices)
        self.num_nodes = num_nodes
        if isinstance(precision, Precision):  # the Trainer's, chosen as Lightning's (trainer/precision_flag.py)
            assert precision.device_type == self.device_type, (precision.device_type, self.device_type)
            self.precision = precision
        else:
            self.precision = Precision(precision, device_type=self.device_type)
        placement = Placement(
            self.device_type, tuple(self.device_indices), num_nodes, self.precision, compile=compile_options(compile)
        )
        # fault_tolerance (a trainmesh.FaultTolerance): replica groups over torchft (strategies/fault_tolerance.py)
        self.strategy: Strategy = build_strategy(strategy, placement, fault_tolerance=fault_tolerance)
        # "auto" on several processes is provisional (ddp) until the model is known: _choose_strategy.
        self._choice = StrategyChoice(strategy, placement, num_nodes=num_nodes, max_restarts=max_restarts)
        self.launcher: Launcher = self._choice.launcher_for(self.strategy)
        self.process = ProcessInfo()  # this process's place, once the launcher has started it
        self.supervision = Supervision()  # watchdog, stop agreement, preemption: supervision/
        self._environment_ready = False
        self._parameter_moves: list[ParameterMoves] = []  # one per module placed
        self._placed: nn.Module | None = None  # the latest placed module: sharded optimizer state is keyed by it
        # Every save and restore through this Runtime, the Trainer's checkpoints included (runtime_checkpoints.py).
        self.checkpoints = RuntimeCheckpoints(self, CheckpointSaves(self.all_gather_object, self.supervision.paused))
        self.trainer_port = TrainerPort(self)  # what the Trainer needs beyond a user loop's verbs (runtime_port.py)

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
        if self.process.reports_to_parent:
            self.teardown()  # a spawned worker ends with this call: leave its group cleanly
        return result

    def setup_environment(self) -> None:
        """Join the process group, build the mesh and claim a device; idempotent."""
        if not self._environment_ready:
            self.process = self.launcher.process_info()
            self.strategy.setup_environment(self.process)
            self._environment_ready = True
            self.supervision.watch_departures()  # the watchdog outside fit, until the group's teardown
            if self._choice.reason and self.process.global_rank == 0:
                # Said here, in the process that trains: under the elastic agent the process that
                # chose first is the agent, which re-runs the script (and the choice) as the workers.
                log.info(self._choice.reason)

    @property
    def global_rank(self) -> int:
        return self.process.global_rank

    @property
    def local_rank(self) -> int:
        return self.process.local_rank

    @property
    def node_rank(self) -> int:
        return self.process.node_rank

    @property
    def world_size(self) -> int:
        return self.process.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.process.global_rank == 0

    @property
    def device(self) -> torch.device:
        return self.strategy.root_device

    @property
    def mesh(self) -> ParallelMesh:
        """The run's named device mesh: data-parallel rank and size, groups by axis."""
        return self.strategy.mesh

    @property
    def strategy_choice(self) -> str:
        """Why ``strategy="auto"`` picked this strategy ("" when it did not choose by memory)."""
        return self._choice.reason

    @property
    def strategy_name(self) -> str:
        """The strategy's name ("ddp", "fsdp", ...), for what the run reports about itself."""
        return self.strategy.name

    @property
    def capabilities(self) -> StrategyCapabilities:
        """What the strategy supports in this run (manual optimization, compile, FLOP counting, ...)."""
        return self.strategy.capabilities

    def _choose_strategy(self, module: nn.Module) -> None:
        """For ``strategy="auto"`` on several processes: ddp, zero1, sharded or fsdp, the first
        whose per-rank memory estimate for ``module`` fits a device; says on rank 0 which and why.

        Called before the processes set up (by the Trainer, with the model it was given).
        """
        world_size = len(self.device_indices) * self.num_nodes
        if not self._choice.chooses_by_memory(world_size) or self._environment_ready:
            return
        chosen = self._choice.choose(module, world_size)
        # Nothing has started yet: the chosen strategy's launcher (its start method, processes and
        # worker environment; fsdp on CPU asks for huge pages, which ddp, the provisional one, does not).
        self.launcher = self._choice.launcher_for(chosen)
        self.strategy = chosen
        check_compiled(module, chosen, self._choice.placement)  # torch.compile(model) under one that does not compile

    def _uncompiled(self, module: Any) -> Any:
        """``torch.compile(m)``: ``m``, to be compiled where the strategy compiles (strategies/compile.py)."""
        return uncompiled(module, self.strategy, self._choice.placement)

    # ---- model, optimizers, data ------------------------------------------------------------
    def module_init_context(self) -> AbstractContextManager[Any]:
        """Where ``configure_model`` builds layers: the meta device where the strategy shards."""
        return self.strategy.module_init_context()

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
        module = self._uncompiled(module)
        # Lightning's ModelParallelStrategy initialises what trainer.init_module(empty_init=True) built on meta
        if not (
            builds_on_meta(self.strategy.module_init_context()) or getattr(self.strategy, "empty_init_on_meta", False)
        ):
            refuse_meta_tensors(module, self.strategy.name)
        moves = ParameterMoves(module)
        placed = self.strategy.setup_module(module)
        moves.record_placement(module)
        self._parameter_moves.append(moves)
        self._placed = placed
        return placed

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> list[RuntimeOptimizer]:
        """Wrap the optimizers for the strategy; one built before ``setup_module`` (over the
        parameters the strategy then replaced, as fsdp does) is pointed at the new ones."""
        self.setup_environment()
        for optimizer in optimizers:
            for moves in self._parameter_moves:
                rebind_optimizer(inner_optimizer(optimizer), moves)
        refuse_own_step_on_shards(optimizers, self.strategy.capabilities.memory_model, self.strategy.name)
        prepared = self.strategy.setup_optimizers(self._placed, optimizers)
        return [RuntimeOptimizer.of(opt, self.precision) for opt in prepared]

    def setup_dataloaders(
        self,
        *loaders: Any,
        train: bool = True,
        batch_hooks: BatchHooks | None = None,
        distribute: bool = True,
        shuffle: bool | None = None,
        predict: bool = False,
        wrap_samplers: bool = False,
    ) -> Any:
        """Add what the strategy needs (a distributed sampler) and move batches to the device,
        through Lightning's batch-transfer ``batch_hooks`` where given (``dataloader_idx``: the
        loader's place among ``loaders``). ``distribute=False`` (Lightning's
        ``use_distributed_sampler=False``): each loader is read as it is, its sampler the user's.

        ``shuffle`` orders a training loader's distributed shards: None (the default, as Lightning's
        ``Fabric.setup_dataloaders``), shuffled where its sampler is a ``RandomSampler``, in order
        otherwise; True or False, every training loader shuffled with the seed or none, whatever
        its sampler, as Lightning's Trainer does (the Trainer passes ``not overfit_batches``).
        Evaluation loaders (``train=False``) are split as Lightning's Trainer splits them: rank r
        reads samples r, r+W, ... of the loader's order, padded by repeating the first so that
        every process runs as many batches; ``predict=True``: unpadded, every sample once.
        ``wrap_samplers``: pytorch-lightning 1.9.5's shares (a 1.x module's loaders: every sampler
        dealt out by ``DistributedSamplerWrapper``, ``strategies.sampling.shard_dataloader``).

        After ``seed_everything(seed, workers=True)``, a loader with workers and no
        ``worker_init_fn`` of its own gets one that seeds each worker from the loader's base seed, the
        worker id and this process's rank, as Lightning's (:func:`trainmesh.seed.seed_worker`).
        """
        self.setup_environment()
        # This process's latest seed_everything wins (it may have come after this Runtime was
        # built); a spawned process never ran one and has the settings captured in __init__.
        settings = seed_settings() or self.seed_settings
        seed = sampler_seed(self.seed_settings)  # Lightning's sampler reads PL_GLOBAL_SEED
        if train and self.world_size > 1:
            # Every process must shuffle with one seed, or the shards overlap and miss samples
            # (a script seeded per rank, say): rank 0's wins.
            seed = self.broadcast(seed, 0)
        wrapped = []
        for index, loader in enumerate(loaders):
            if settings is not None and settings.workers:
                loader = with_worker_init_fn(loader, functools.partial(seed_worker, rank=self.global_rank))
            options = dict(train=train, seed=seed, shuffle=shuffle, predict=predict, wrap_samplers=wrap_samplers)
            processed = process_dataloader(self.strategy, loader, distribute=distribute, **options)
            if batch_hooks is None:
                wrapped.append(DeviceDataLoader(processed, self.to_device, self._moves_batches))
            else:
                convert = self.precision.convert_input
                wrapped.append(hooked_loader(processed, batch_hooks, index, self.device, convert, self._moves_batches))
        return wrapped[0] if len(wrapped) == 1 else wrapped

    def to_device(self, data: Any) -> Any:
        """``data``'s tensors on this process's device, in the precision's input dtype."""
        if not self._moves_batches():
            return data  # already where it belongs: skip the walk
        return self.precision.convert_input(move_data_to_device(data, self.strategy.root_device))

    def _moves_batches(self) -> bool:
        """Whether :meth:`to_device` changes anything: not on CPU in the inputs' own dtype."""
        return self.strategy.root_device.type != "cpu" or self.precision.converts_input

    # ---- the step ---------------------------------------------------------------------------
    def train_step(
        self, model: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool = True, hooks: StepHooks | None = None
    ) -> StepResult:
        """One training step run by the strategy: forward (``training_step``), ``hooks.step_end``,
        the loss and backward. Returns the loss (None on ranks that have none) and the output."""
        return self.strategy.train_step(
            model, batch, batch_idx, sync_grads=sync_grads, hooks=hooks or StepHooks(backward=self.backward)
        )

    def eval_step(
        self, model: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks | None = None
    ) -> Any:
        """``model.<hook>(batch, batch_idx, *extra)`` for evaluation, run by the strategy."""
        return self.strategy.eval_step(model, hook, batch, batch_idx, *extra, hooks=hooks or StepHooks())

    def autocast(self) -> AbstractContextManager[Any]:
        """Run the forward pass in the precision's compute dtype (a no-op in full precision)."""
        return self.precision.autocast()

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward(*args, **kwargs)`` on the loss scaled for the precision (16-mixed)."""
        self.precision.scale_loss(loss).backward(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        return self.precision.optimizer_step(inner_optimizer(optimizer), closure)

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> AbstractContextManager[Any]:
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
        unscale: bool = True,
        parameters: list[torch.Tensor] | None = None,
    ) -> torch.Tensor | None:
        """Clip the gradients of ``optimizer``'s parameters (as Fabric and Lightning do) by their
        global norm (``max_norm``), across devices, or by value (``clip_val``); returns the norm.
        ``unscale=False``: the gradients as they are, scaled under 16-mixed (what Lightning's
        ``LightningModule.clip_gradients`` clips in manual optimization). ``parameters``: the ones to clip
        (a Fabric precision plugin's ``main_params``), else the optimizer's."""
        if (max_norm is None) == (clip_val is None):
            raise ValueError("clip_gradients needs exactly one of max_norm= or clip_val=")
        inner = inner_optimizer(optimizer)
        if unscale:
            self.precision.unscale_gradients(inner)
        if parameters is None:
            parameters = [param for group in inner.param_groups for param in group["params"]]
        return self.strategy.clip_gradients(
            module, parameters, max_norm=max_norm, clip_value=clip_val, norm_type=norm_type
        )

    def normalize_gradients(
        self, model: nn.Module, num_tokens: torch.Tensor, *, loss_sum: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """After a step's last backward, before clipping: the gradients of a summed loss become
        those of its mean over the global batch's valid tokens (``num_tokens``: this process's
        count over the step). Returns the global mean of ``loss_sum`` when given.

        >>> runtime.normalize_gradients(model, runtime.train_step(model, batch, 0).num_tokens)  # doctest: +SKIP
        """
        from trainmesh.strategies.gradients import divide_by_global_tokens  # only a token-averaged loss's

        return divide_by_global_tokens(self.mesh, model.parameters(), num_tokens, loss_sum)

    # ---- collectives ------------------------------------------------------------------------
    def all_reduce(self, value: Any, op: str = "mean", *, over: str = "dp", group: Any = None) -> Any:
        """Reduce tensors (or numbers) across the processes of a mesh axis ("dp": every
        data-parallel replica), or of a torch process ``group`` of some of them (``self.log``'s
        ``sync_dist_group``; a group of every one, or any without a process group, as none);
        every one of them gets the result."""
        if group is not None and (not process_group_exists() or collectives.holds_the_axis(self.mesh, group, over)):
            group = None  # (Lightning's sync: a no-op on one process, whatever the group)

        def reduce_one(tensor: torch.Tensor) -> torch.Tensor:
            if group is not None:
                return collectives.reduce_in_place(self.mesh, tensor.clone(), op, group=group)
            return collectives.reduce(self.mesh, tensor, op, over=over)

        if isinstance(value, (int, float)):
            return reduce_one(torch.tensor(float(value), device=self.device)).item()
        return apply_to_tensors(value, reduce_one)

    def all_gather(
        self, value: Any, *, over: str = "dp", group: Any = None, sync_grads: bool = False, stack_alone: bool = True
    ) -> Any:
        """Tensors from every process of the axis (or of a torch process ``group``), stacked along
        a new first dimension; ``sync_grads``: differentiable; ``stack_alone=False``: as they are
        without a process group (collectives.all_gather)."""
        return collectives.all_gather(
            self.mesh, value, over=over, group=group, sync_grads=sync_grads, stack_alone=stack_alone
        )

    def all_gather_object(self, obj: Any) -> list[Any]:
        """A picklable object from every process, in rank order."""
        return collectives.all_gather_object(self.mesh, obj)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return collectives.broadcast(self.mesh, obj, src)

    def broadcast_tensors(self, tensors: Sequence[torch.Tensor], src: int = 0, *, over: str = "dp") -> None:
        """In place: ``tensors`` take rank ``src``'s values on every process of the axis (free on one)."""
        collectives.broadcast_tensors(self.mesh, tensors, src, over=over)

    def barrier(self, name: str | None = None) -> None:
        collectives.barrier(self.mesh)

    # ---- checkpoints: a user loop's verbs, the service's (runtime_checkpoints.py) -----------------
    def state_dicts(
        self, model: nn.Module | None, optimizers: Sequence[Any], *, sharded: bool = False
    ) -> dict[str, Any]:
        """``{"model": ..., "optim": [...]}``: full tensors, or each rank's shards (``sharded``)."""
        return self.checkpoints.state_dicts(model, optimizers, sharded=sharded)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """The model's whole weights on rank 0 (CPU tensors, one process's names), None on the
        others, from any strategy. Every rank calls it: it gathers where the model is sharded."""
        return self.checkpoints.full_state_dict(model)

    def save(self, path: str, state: dict[str, Any]) -> None:
        """Save ``state``: modules and optimizers in it are saved as state dicts, the rest as is.

        >>> # runtime.save("ckpt.pt", {"model": model, "optimizer": optimizer, "step": 10})
        """
        self.checkpoints.save(path, state)

    def load(self, path: str, state: dict[str, Any] | None = None, *, strict: bool = True) -> dict[str, Any]:
        """Load ``path`` into the modules and optimizers of ``state`` in place.

        Returns the entries of the checkpoint that were not loaded into an object.
        """
        return self.checkpoints.load(path, state, strict=strict)

    def teardown(self) -> None:
        self.strategy.teardown(failed=False)
        self._environment_ready = False
