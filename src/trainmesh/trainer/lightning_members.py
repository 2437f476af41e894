"""Lightning 2.6's Trainer properties and methods that describe the run (its devices, precision
plugin, the callbacks of a kind, the loaders asked for, where the fit loop is), each as Lightning's
``Trainer`` defines it: kept out of trainer.py, which holds the loop's entry points."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from trainmesh.callbacks.checkpoint import Checkpoint
from trainmesh.trainer.combined_loaders import as_given
from trainmesh.trainer.lightning2_arguments import RunBehaviour
from trainmesh.trainer.run_properties import RunProperties
from trainmesh.trainer.states import TrainerFn, TrainerStatus
from trainmesh.utilities.empty_init import SkipInit
from trainmesh.utilities.lazy import is_instance
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from trainmesh.plugins import precision as precision_plugins
    from trainmesh.trainer.loop_views import EvaluationLoopView, FitLoopView


class LightningMembers(RunProperties):
    """The Trainer's members a Lightning program reads about its run; the Trainer is one."""

    _settings: Any
    _behaviour: RunBehaviour
    accumulate_grad_batches: int
    max_epochs: int | None
    max_steps: int

    @property
    def reload_dataloaders_every_n_epochs(self) -> int:
        return self._behaviour.reload_dataloaders_every_n_epochs

    @property
    def enable_autolog_hparams(self) -> bool:
        return self._behaviour.enable_autolog_hparams

    # ---- devices ------------------------------------------------------------------------------
    @property
    def _accelerator_connector(self) -> Any:
        """Lightning's private connector, as far as published callbacks read it (``is_distributed``)."""
        return self.runtime.trainer_port.accelerator_connector

    @property
    def accelerator(self) -> Any:
        """The run's accelerator object (``CPUAccelerator``, ``CUDAAccelerator``, ``MPSAccelerator``): the
        program's own where it passed one (``Trainer(accelerator=acc)``: ``trainer.accelerator is acc``, as
        in Lightning), else one made on the first read and the same object after."""
        from trainmesh import accelerator_types

        if self.__dict__.get("_accelerator_object") is None:
            classes = {"cuda": accelerator_types.CUDAAccelerator, "mps": accelerator_types.MPSAccelerator}
            self.__dict__["_accelerator_object"] = classes.get(
                self.runtime.device_type, accelerator_types.CPUAccelerator
            )()
        return self.__dict__["_accelerator_object"]

    @property
    def node_rank(self) -> int:
        return self.runtime.trainer_port.place.node_rank

    @property
    def num_nodes(self) -> int:
        return self.runtime.num_nodes

    @property
    def device_ids(self) -> list[int]:
        """The device indices of one node (CPU processes count 0, 1, ...), as Lightning lists them."""
        return list(self.runtime.device_indices)

    @property
    def num_devices(self) -> int:
        """The number of devices per node."""
        return len(self.device_ids)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        """``num_replicas`` and ``rank`` of the data-parallel split; None for one device (Lightning's
        single-device strategy)."""
        planned = self.num_devices * self.num_nodes
        if self.world_size > 1:
            mesh = self.runtime.mesh
            return {"num_replicas": mesh.dp_size, "rank": mesh.dp_rank}
        return {"num_replicas": planned, "rank": self.global_rank} if planned > 1 else None

    # ---- precision ----------------------------------------------------------------------------
    @property
    def precision_plugin(self) -> precision_plugins.Precision:
        """Lightning's precision plugin for the run's precision (``MixedPrecision`` with its scaler, ...)."""
        from trainmesh.plugins import precision as precision_plugins  # here: a run that never asks does not import it

        if self.runtime.precision.plugin is not None:  # the one given, or made at the first question: one object
            return self.runtime.precision.plugin  # type: ignore[no-any-return]
        name = self.precision
        plugin: precision_plugins.Precision
        if name in ("16-mixed", "bf16-mixed"):
            plugin = precision_plugins.MixedPrecision(name, self.runtime.device_type, scaler=self.scaler)
        elif name in ("16-true", "bf16-true"):
            plugin = precision_plugins.HalfPrecision(name)
        elif name == "64-true":
            plugin = precision_plugins.DoublePrecision()
        else:
            plugin = precision_plugins.Precision()
        self.runtime.precision.plugin = plugin
        return plugin

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The gradient scaler of ``precision="16-mixed"``; None otherwise."""
        return self.runtime.precision.scaler

    # ---- the callbacks of a kind --------------------------------------------------------------
    @property
    def checkpoint_callbacks(self) -> list[Any]:
        return [c for c in self.callbacks if isinstance(c, Checkpoint)]

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        # A run without one never imports its module (the loop reads this property in every fit).
        return [c for c in self.callbacks if is_instance(c, "trainmesh.callbacks.early_stopping", "EarlyStopping")]

    @property
    def progress_bar_callback(self) -> Any:
        from trainmesh.callbacks.progress import ProgressBar  # here: imported with the bar itself, or by asking

        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    # ---- the run's status ---------------------------------------------------------------------
    @property
    def interrupted(self) -> bool:
        return bool(self.state.status == TrainerStatus.INTERRUPTED)

    @property
    def received_sigterm(self) -> bool:
        """Whether this fit received SIGTERM (trainmesh then saves a checkpoint and exits with status 75)."""
        return self.runtime.supervision.received_sigterm

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's first process (local rank 0)."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Tensors made in the block are on the run's device in the precision's parameter dtype
        (``"bf16-true"``: bfloat16); ``empty_init=True`` leaves them uninitialized (``torch.nn.init``
        skipped), for weights a checkpoint fills. Under a strategy that shards parameters build the
        model in ``configure_model`` instead (said, as Lightning says it)."""
        if self.runtime.capabilities.shards_parameters:
            rank_zero_warn(
                "`trainer.init_module` cannot fully support proper instantiation of your model with a strategy "
                "that shards parameters. Please instantiate your model inside the "
                "`LightningModule.configure_model` hook instead",
                category=PossibleUserWarning,
            )
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.runtime.precision.param_dtype)
        try:
            # Lightning's ModelParallelStrategy builds on the meta device and initialises the layers once
            # its configure_model parallelized them (reset_parameters, strategies/lightning_model_parallel.py)
            on_meta = bool(empty_init) and self.runtime.trainer_port.empty_init_on_meta
            with torch.device("meta" if on_meta else self.runtime.device), SkipInit(enabled=bool(empty_init)):
                yield
        finally:
            torch.set_default_dtype(previous)

    # ---- the loaders and where the fit loop is ------------------------------------------------
    @property
    def train_dataloader(self) -> Any:
        """The training loader fit reads (split for this process), or None before fit asked for it."""
        return self._asked("train")

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader(s) of fit or validate; a list where there are several."""
        return self._asked("validate")

    @property
    def test_dataloaders(self) -> Any:
        return self._asked("test")

    @property
    def predict_dataloaders(self) -> Any:
        return self._asked("predict")

    def _asked(self, kind: str) -> Any:
        loaders = self._state.stage_loaders.get(kind)
        if loaders is None:
            return None
        plain = [getattr(loader, "loader", loader) for loader in loaders]
        return as_given(self._state.stage_shapes.get(kind), plain)

    @property
    def is_last_batch(self) -> bool:
        """Whether fit's training batch in hand is its epoch's last (from the batch's fetch on)."""
        return bool(self._state.is_last_batch)

    # ---- Lightning's loop objects, as programs read them (loop_views.py) ---------------------------
    @property
    def fit_loop(self) -> FitLoopView:
        """Lightning's ``trainer.fit_loop``: ``max_epochs``, ``epoch_progress``, ``epoch_loop.batch_progress``,
        ``epoch_loop._batches_that_stepped``, ``epoch_loop.val_loop``, ... read-only but for its settings."""
        from trainmesh.trainer.loop_views import (
            FitLoopView,
            LoopOwner,
        )  # the views: imported by a program that reads them

        return FitLoopView(cast(LoopOwner, self), self._state.progress)

    @fit_loop.setter
    def fit_loop(self, loop: Any) -> None:
        # 1.x's trainer.fit_loop = KFoldLoop(...): refused with what to do (loops/loop.py)
        from trainmesh.loops.loop import TRAINER_LOOPS_REFUSAL
        from trainmesh.utilities.refusal import RefusedError

        raise RefusedError(f"trainer.fit_loop = {type(loop).__name__}(...): {TRAINER_LOOPS_REFUSAL}")

    @property
    def validate_loop(self) -> EvaluationLoopView:
        """Lightning's ``trainer.validate_loop`` (``trainer.validate``'s): ``batch_progress``, ``max_batches``."""
        from trainmesh.trainer.loop_views import EvaluationLoopView, LoopOwner

        return EvaluationLoopView(cast(LoopOwner, self), self._state.progress, "validate", "trainer.validate_loop")

    @property
    def test_loop(self) -> EvaluationLoopView:
        """Lightning's ``trainer.test_loop``: ``batch_progress``, ``max_batches``, ``num_dataloaders``."""
        from trainmesh.trainer.loop_views import EvaluationLoopView, LoopOwner

        return EvaluationLoopView(cast(LoopOwner, self), self._state.progress, "test", "trainer.test_loop")

    def _connect_optimizer_loop(self, loop: Any) -> None:
        """1.x's ``fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=loop)``: the loop gets this Trainer
        (1.x's ``Loop.trainer``) and the fits' several-optimizer turns call it (lightning1/optimizer_turns.py)."""
        from trainmesh.loops.optimization.optimizer_loop import OptimizerLoop

        if not isinstance(loop, OptimizerLoop):
            raise TypeError(
                f"batch_loop.connect(optimizer_loop=...) takes a subclass of trainmesh.loops.OptimizerLoop, got "
                f"{type(loop).__name__}"
            )
        loop.trainer = cast(Any, self)
        self._state.optimizer_loop = loop

    def _call_lightning_module_hook(self, hook_name: str, *args: Any, **kwargs: Any) -> Any:
        """pytorch-lightning 1.x's private caller, which a 1.x ``OptimizerLoop`` subclass calls itself: the
        module's hook with these arguments (None where it has none)."""
        hook = getattr(self.lightning_module, hook_name, None)
        return hook(*args, **kwargs) if callable(hook) else None

    def _call_strategy_hook(self, hook_name: str, *args: Any, **kwargs: Any) -> Any:
        """pytorch-lightning 1.x's private caller of a strategy hook, for what a 1.x ``OptimizerLoop`` subclass
        calls: ``training_step_end`` (and the other ``*_step_end``), which 1.x's strategies give back unchanged."""
        if hook_name.endswith("_step_end"):
            return args[0]
        raise NotImplementedError(
            f"trainer._call_strategy_hook({hook_name!r}) (pytorch-lightning 1.x's private caller) takes only the "
            f"*_step_end hooks in trainmesh; call trainer.strategy.{hook_name}(...) yourself"
        )

    @property
    def num_training_batches(self) -> int | float:
        """Lightning's (its ``fit_loop.max_batches``): the fit's loader's count, and what a callback
        added to it for the running fit (``trainer.fit_loop.max_batches += 1``: loop_views.py)."""
        counted: int | float = self._state.num_training_batches
        added: int = self._state.loop.added_batches
        return counted + added

    @property
    def _val_check_time_interval(self) -> float | None:
        """Lightning's: a time-based ``val_check_interval`` in seconds (None for a count or a fraction,
        and under ``fast_dev_run``); its callbacks read it (ModelCheckpoint saves after validation then)."""
        seconds: float | None = self._settings.val_check_time
        return seconds

    @property
    def val_check_batch(self) -> int | float | None:
        """Lightning's: the training batches between validations, settled as a fit starts (None before
        any fit); an int ``val_check_interval`` as given, a fraction of the epoch's batches at least 1."""
        # the loader's count (Lightning settled it when the loader was set up: no batch a callback added)
        interval, batches = self._settings.val_check_interval, self._state.num_training_batches
        if not self._state.progress.fit_started or batches == 0:  # Lightning settles it only for batches to run
            return None
        if self._settings.val_check_time is not None:  # time-based: no batch count (Lightning's None)
            return None
        if isinstance(interval, int) or math.isinf(batches):
            return interval if isinstance(interval, int) else float("inf")
        return max(1, int(batches * interval))

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        """The batches of each validation loader the sanity check runs: Lightning's, from the fit's
        validation counts (``num_val_batches`` of the fit, whatever ran since)."""
        steps = self._settings.num_sanity_val_steps
        steps = math.inf if steps == -1 else steps
        return [min(steps, count) for count in self._state.batch_counts.get("fit", [])]

    @property
    def num_val_batches(self) -> list[int | float]:
        """Lightning's: the batches of each validation loader, ``trainer.validate``'s while it runs
        or after, else the fit's (set as its loaders are made; [] before)."""
        validating = self._state.trainer_state.fn == TrainerFn.VALIDATING
        return list(self._state.batch_counts.get("validate" if validating else "fit", []))

    @property
    def num_test_batches(self) -> list[int | float]:
        """Lightning's: the batches of each test loader of the latest ``trainer.test`` ([] before)."""
        return list(self._state.batch_counts.get("test", []))

    @property
    def num_predict_batches(self) -> list[int | float]:
        """Lightning's: the batches of each loader of the latest ``trainer.predict`` ([] before)."""
        return list(self._state.batch_counts.get("predict", []))

    @property
    def enable_validation(self) -> bool:
        """Whether fit validates: validation loaders defined, ``validation_step`` overridden and
        ``limit_val_batches`` not 0."""
        fit_data = self._state.fit_data
        return fit_data is not None and fit_data.validation_enabled()

    def _load_train_loader(self) -> None:
        """The fit's train loader asked for now, where the fit has not asked yet (Lightning's
        ``fit_loop.setup_data()``, which ``configure_optimizers`` may call to read ``len(trainer.train_dataloader)``)."""
        fit_data = self._state.fit_data
        if "train" not in self._state.stage_loaders and fit_data is not None:
            fit_data.train_loader()

    @property
    def estimated_stepping_batches(self) -> int | float:
        """The optimizer steps fit will take: the epoch's batches over ``accumulate_grad_batches``
        (rounded up) times ``max_epochs``, at most ``max_steps``; ``max_steps`` for a loader without
        a length, inf for ``max_epochs=-1`` without ``max_steps``. Read in ``configure_optimizers``
        it asks for the train loader there, as Lightning does."""
        max_epochs: int = self._settings.max_epochs  # the limit the fit runs with (settled), read before a fit too
        if max_epochs == -1:
            return math.inf if self.max_steps == -1 else self.max_steps
        if "train" not in self._state.stage_loaders and self._state.fit_data is not None:
            rank_zero_info("Loading `train_dataloader` to estimate number of stepping batches.")
        self._load_train_loader()
        total = self.num_training_batches
        if total == math.inf:
            return self.max_steps
        estimated = math.ceil(total / self.accumulate_grad_batches) * max(max_epochs, 1)
        return min(estimated, self.max_steps) if self.max_steps != -1 else estimated
