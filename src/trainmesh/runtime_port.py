"""What the Trainer needs from a Runtime beyond the verbs a user's own loop calls
(``runtime.trainer_port``).

A loop of one's own never calls these; the Trainer does, and so they are kept off the Runtime's
public face (pinned by tests/test_runtime.py) without being reached as its private members: the
choice of a strategy by the model's memory, the model a ``torch.compile`` wraps, where only some
ranks log, the loss's backward as one callable, whether predict returns its predictions, and the
loop's state handed to a recovering fault-tolerant peer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from trainmesh.launchers.base import Launcher, ProcessInfo
from trainmesh.precision import Precision
from trainmesh.seed import SeedSettings, seed_everything, seed_in_effect
from trainmesh.strategies.lightning_face import serving
from trainmesh.strategies.protocol import Strategy
from trainmesh.utilities.lazy import is_instance


class _Host(Protocol):
    """The Runtime, as the port reads it (named by what it uses: runtime.py imports this module).
    Read at each call: ``strategy="auto"`` may replace the strategy once the model is known."""

    strategy: Strategy
    precision: Precision
    seed_settings: SeedSettings | None
    process: ProcessInfo
    launcher: Launcher
    _environment_ready: bool

    @property
    def mesh(self) -> Any: ...

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None: ...
    def _choose_strategy(self, module: nn.Module) -> None: ...
    def _uncompiled(self, module: Any) -> Any: ...


class TrainerPort:
    """The Trainer's door into its Runtime for what a user's loop never calls (see the module's
    docstring); ``runtime``: the Runtime that owns it."""

    def __init__(self, runtime: _Host) -> None:
        self._runtime = runtime

    def choose_strategy(self, module: nn.Module) -> None:
        """For ``strategy="auto"`` on several processes: the first strategy whose per-rank memory
        estimate for ``module`` fits a device; called before the processes start."""
        self._runtime._choose_strategy(module)

    def use_checkpoint_io(self, checkpoint_io: Any) -> None:
        """A ``TorchCheckpointIO`` the program passed in ``plugins``: the strategy's ``checkpoint_io``
        (lightning_face.py), the program's object as in Lightning."""
        use = getattr(self._runtime.strategy, "use_checkpoint_io", None)
        if use is not None:
            use(checkpoint_io)

    def refuse_strategy_for_trainer(self) -> None:
        """Raise where the Trainer cannot run the strategy as built (Fabric's form of
        ``ModelParallelStrategy``: its ``parallelize_fn``), as Lightning's Trainer-side class refuses it."""
        refuse = getattr(self._runtime.strategy, "refuse_for_trainer", None)
        if refuse is not None:
            refuse()

    def follow_run_generation(self, lightning1: bool) -> None:
        """Before a stage places its module: whether the Trainer's run is pytorch-lightning 1.x's, for a
        strategy whose defaults differ by generation (ddp's ``find_unused_parameters``)."""
        follow = getattr(self._runtime.strategy, "follow_run_generation", None)
        if follow is not None:
            follow(lightning1)

    def reseed_for_run(self) -> None:
        """Seed every generator again with the latest ``seed_everything``'s seed where the strategy's
        ``capabilities.reseeds_each_run`` (Lightning's ``reset_seed()`` as its DDP, FSDP and
        ModelParallel strategies set up each run); nothing without a seed, as Lightning's."""
        if not self._runtime.strategy.capabilities.reseeds_each_run:
            return
        settings = seed_in_effect(self._runtime.seed_settings)  # a spawned worker has the Runtime's
        if settings is not None:
            seed_everything(settings.seed, workers=settings.workers, verbose=False)
        elif "PL_GLOBAL_SEED" in os.environ:  # Lightning's reset_seed reads the variable
            seed_everything(None, verbose=False)

    @property
    def strategy_class_name(self) -> str:
        """The strategy's class ("SingleDeviceStrategy", "DDPStrategy", ...), as Lightning's profiler
        names the steps it runs (trainer/profiling.py)."""
        return type(self._runtime.strategy).__name__

    @property
    def module_device_mesh(self) -> Any:
        """The ``DeviceMesh`` a module's ``device_mesh`` shows as its ``configure_model`` runs (Lightning's
        form of ModelParallelStrategy: strategies/lightning_model_parallel.py); None for other strategies."""
        return getattr(self._runtime.strategy, "module_device_mesh", None)

    @property
    def empty_init_on_meta(self) -> bool:
        """Whether ``trainer.init_module(empty_init=True)`` builds on the meta device, the strategy
        initialising the layers once placed (Lightning's ModelParallelStrategy); else uninitialised."""
        return bool(getattr(self._runtime.strategy, "empty_init_on_meta", False))

    @property
    def place(self) -> ProcessInfo:
        """This process's place as a program reads it (``trainer.world_size``, ``trainer.is_global_zero``):
        once set up, the launcher's; before (a script's code before ``fit``, ddp_spawn's launching
        process), the place the launcher plans for it, as Lightning's strategy reports it from the
        Trainer's construction on (the loop reads ``runtime.process``, set up)."""
        runtime = self._runtime
        return runtime.process if runtime._environment_ready else runtime.launcher.planned_process()

    def strategy_serving(self, trainer_ref: Callable[[], Any]) -> Strategy:
        """The strategy, its Lightning ``optimizers`` and ``lr_scheduler_configs`` those of the Trainer
        that ``trainer_ref`` (a weak reference) returns: ``trainer.strategy`` (lightning_face.py)."""
        return serving(self._runtime.strategy, trainer_ref)

    def uncompiled(self, module: Any) -> Any:
        """``torch.compile(m)``: ``m``, to be compiled where the strategy compiles (strategies/compile.py)."""
        return self._runtime._uncompiled(module)

    @property
    def metrics_source(self) -> Callable[[Any], Any] | None:
        """Where only the last pipeline stage computes the loss and logs: a function giving every
        rank that stage's value of an object (None when every rank logs)."""
        return self._runtime.strategy.metrics_source

    @property
    def loss_backward(self) -> Callable[..., None]:
        """The Runtime's ``backward`` as one callable for a loop to hold through a run:
        ``Tensor.backward`` itself where the precision scales no loss, so that a step makes no
        wrapper calls."""
        if self._runtime.precision.scaler is None:
            return torch.Tensor.backward
        return self._runtime.backward

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """``state()`` travels with the weights to a replica group that recovers from a live peer
        (``fault_tolerance``), which calls ``load`` with it; nothing happens without fault tolerance."""
        self._runtime.strategy.share_state_with_peers(key, state, load)

    def returns_predictions(self, return_predictions: bool | None) -> bool:
        """Whether ``trainer.predict`` keeps and returns each rank's own predictions, as Lightning's
        ``_PredictionLoop.return_predictions`` decides: by default yes, but not where the workers are
        spawned or forked (ddp_spawn, ddp_fork: the launching process gets None), where ``True`` is
        refused with Lightning's error (raised there in each worker, here before they start)."""
        from trainmesh.utilities.exceptions import MisconfigurationException  # only predict asks

        spawns = is_instance(self._runtime.launcher, "trainmesh.launchers.spawn", "SpawnLauncher")
        if return_predictions and spawns:
            raise MisconfigurationException(
                "`return_predictions` should be set to `False` when using the strategies that spawn or fork."
                f" Found {return_predictions} with strategy {type(self._runtime.strategy)}."
            )
        return not spawns if return_predictions is None else return_predictions

    @property
    def accelerator_connector(self) -> Any:
        """What programs read of Lightning's private ``trainer._accelerator_connector`` (``is_distributed``)."""
        from trainmesh.strategies.lightning_face import AcceleratorConnectorView

        return AcceleratorConnectorView(self._runtime.strategy)

    @property
    def parallel(self) -> bool:
        """Lightning's ``isinstance(trainer.strategy, ParallelStrategy)`` (1.x's ``trainer.data_parallel``)."""
        # Imported here: Lightning's names import every parallel strategy's module, which a run
        # that never asks this does not need (`import trainmesh; trainmesh.Trainer` stays light).
        from trainmesh.strategies.lightning_names import ParallelStrategy

        return isinstance(self._runtime.strategy, ParallelStrategy)
