"""The strategy protocol: how a model, its optimizers and its data are placed on devices, and
who runs a step.

The Runtime talks to strategies only through these members (and the Trainer only to the
Runtime); a behaviour that differs between strategies is a member here, never an
``isinstance`` check in a loop. Collectives are not strategy members: they depend only on the
mesh (``trainmesh.strategies.collectives``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from torch import nn

from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.writers import SYNCHRONOUS, CheckpointWriter
from trainmesh.launchers.base import ProcessInfo, ProcessPlan
from trainmesh.precision import Precision
from trainmesh.strategies.capabilities import StrategyCapabilities
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.step import StepHooks, StepResult


@dataclasses.dataclass(frozen=True)
class Placement:
    """The devices and precision a run asked for: what a strategy is built with.

    Args:
        device_type: ``"cpu"``, ``"cuda"`` or ``"mps"`` (default ``'cpu'``).
        devices: the device indices of this node (default ``(0,)``).
        num_nodes: number of nodes (default ``1``).
        precision: the precision setting.
        compile: ``torch.compile`` settings (default ``None``: none).

    Examples:
        >>> Placement("cpu", (0, 1)).devices
        (0, 1)
    """

    device_type: str = "cpu"
    devices: tuple[int, ...] = (0,)
    num_nodes: int = 1
    precision: Precision = dataclasses.field(default_factory=lambda: Precision("32-true", device_type="cpu"))
    # torch.compile's options (None: eager); the strategy compiles at its point in the order
    # in which it applies parallelisms (strategies/compile.py).
    compile: dict[str, Any] | None = None


class Strategy(Protocol):
    """The protocol every strategy implements: how the model, optimizer and data are placed, wrapped,
    sharded or split, how a training and an evaluation step run (the strategy owns the step), how
    values are reduced and how state is saved and loaded. What a strategy supports is its
    ``capabilities`` (:class:`StrategyCapabilities`), read instead of its name. A strategy takes
    everything it needs through its constructor; one dict (``STRATEGIES``) maps names to them.

    Examples:
        >>> from trainmesh.strategies import build_strategy, Placement
        >>> strategy = build_strategy("ddp", Placement("cpu", (0, 1)))  # doctest: +SKIP
        >>> strategy.capabilities.manual_optimization  # doctest: +SKIP
        True
    """

    name: str

    @property
    def processes(self) -> ProcessPlan:
        """How this strategy's processes start (the launcher is built from it): the start method,
        the processes on each node, the variables its workers need from their start (fsdp's huge
        pages on CPU)."""

    @property
    def capabilities(self) -> StrategyCapabilities:
        """What this strategy supports (manual optimization, compile, FLOP counting, ...): read
        instead of the strategy's name or type."""

    @property
    def root_device(self) -> torch.device: ...
    @property
    def mesh(self) -> ParallelMesh:
        """The run's mesh (a one-process mesh until ``setup_environment``)."""

    @property
    def metrics_source(self) -> Callable[[Any], Any] | None:
        """Where only some ranks compute the loss and log (a pipeline's last stage): a function
        giving every rank those ranks' value of an object; None where every rank logs."""

    def with_placement(self, placement: Placement) -> Strategy:
        """A new strategy with this one's constructor arguments, built for ``placement`` (a user's
        instance carries its arguments only: the Trainer's devices and precision come later)."""

    def setup_environment(self, process: ProcessInfo) -> None:
        """Join the process group (if any), build the mesh and pick this process's device."""

    def module_init_context(self) -> AbstractContextManager[Any]:
        """Entered around ``configure_model``: the meta device for sharded strategies."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Place, wrap or shard the module; returns what the loop calls."""

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        """The optimizers as the strategy steps them (zero1: state sharded); ``module`` is the
        placed one (None when a user's loop sets up optimizers first)."""

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
        """Add a distributed sampler or anything else the strategy needs in the loader.

        ``seed`` is the run's seed (``seed_everything``, 0 without it), the same in every
        process: a distributed sampler shuffles with it, so the shards make one permutation.
        ``shuffle`` orders a training loader's shards (``sampling.shard_dataloader``): None, as its
        sampler says; True/False, every loader shuffled or not, as Lightning's Trainer does.
        ``predict`` (with ``train=False``): the loader is a predict loader, whose shares are not
        padded (``sampling.shard_for_evaluation``). ``wrap_samplers``: a pytorch-lightning 1.x
        module's loader, every sampler (a ``RandomSampler`` too) dealt out by
        ``DistributedSamplerWrapper``, as 1.9.5's Trainer deals it (Lightning 2 shards the dataset).
        ``train=None``: Lightning's one-argument ``process_dataloader(dataloader)`` (a program's subclass
        calling ``super()``, strategies/lightning_process_dataloader.py): the loader as it is."""

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        """Forward, ``training_step_end``, loss and backward of one step (gradients not
        synchronised when ``sync_grads`` is False: an accumulation micro-batch)."""

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        """``module.<hook>(batch, batch_idx, *extra)`` (and its ``*_step_end``) for evaluation."""

    def no_backward_sync(self, module: nn.Module) -> AbstractContextManager[Any]:
        """Skip the gradient synchronisation for an accumulation micro-batch (user loops)."""

    def clip_gradients(
        self,
        module: nn.Module,
        parameters: Sequence[torch.Tensor],
        *,
        max_norm: float | None,
        clip_value: float | None,
        norm_type: float,
    ) -> torch.Tensor | None:
        """Clip the gradients of ``parameters`` (one optimizer's, of the placed ``module``) by
        their global norm across every shard and stage (returns it) or by value (returns None)."""

    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        """``{"model": ..., "optim": [...]}`` (``"model"`` only with a module): full tensors, or
        with ``sharded=True`` each rank's shards where the strategy shards."""

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        """Load the ``"model"`` and ``"optim"`` entries that ``state`` holds."""

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str,
        *,
        sharded: CheckpointKeys | None,
        writer: CheckpointWriter = SYNCHRONOUS,
    ) -> None:
        """Write ``checkpoint`` through ``writer`` (at once, or in the background); with ``sharded``
        the strategy may write those entries shard by shard (a distributed checkpoint), else one file."""

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        """A file, or a distributed checkpoint directory resharded onto this run's layout
        (its ``keys`` entries loaded into state shaped like ``module``'s and ``optimizers``')."""

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """State beyond the model and optimizers (the loop's position, its schedulers) that a replica
        recovering from a live peer takes with the weights (fault tolerance); a no-op elsewhere."""

    def teardown(self, *, failed: bool = False) -> None: ...
