"""Module: a ``torch.nn.Module`` that also says how to train, validate, test and predict itself.

It holds no device code: the strategy places it, and batches reach its hooks on the right
device. While a Trainer runs it, ``self.trainer`` points back to that Trainer; logging and the
loop-position properties read from there. Its members come in parts: the hooks' defaults
(``module_hooks.py``, ``data_hooks.py``), hyperparameters (``hyperparameters.py``), Lightning's
conveniences (``module_utilities.py``), the logging calls (``module_log_calls.py``) and the
manual-optimization calls (``module_manual_optimization.py``); this file holds the step hooks, the
properties that say where the module runs, and its checkpoint loading.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
from torch import nn

from trainmesh import hyperparameters
from trainmesh.data_hooks import DataHooks
from trainmesh.hyperparameters import (
    PAST_HPARAMS_KEYS,
    HyperparametersMixin,
    constructor_arguments,
    read_saved_checkpoint,
)
from trainmesh.model_configuration import call_configure_model, configure_model_is_a_hook
from trainmesh.module_fabric import FabricHost
from trainmesh.module_hooks import ModelHooks
from trainmesh.module_host import TRAINER_HOST, ModuleHost
from trainmesh.module_log_calls import LogCalls
from trainmesh.module_manual_optimization import ManualOptimization
from trainmesh.module_utilities import ModuleUtilities, trainer_side_properties
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.model_helpers import _restricted_classmethod


class Module(DataHooks, ModelHooks, HyperparametersMixin, ModuleUtilities, LogCalls, ManualOptimization):
    """Subclass this and define at least ``training_step`` and ``configure_optimizers``.

    Examples:
        >>> import torch.nn.functional as F
        >>> class Classifier(Module):
        ...     def __init__(self, hidden: int = 32):
        ...         super().__init__()
        ...         self.save_hyperparameters()
        ...         self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        ...                                        torch.nn.Linear(hidden, 10))
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         loss = F.cross_entropy(self.net(x), y)
        ...         self.log("train_loss", loss)
        ...         return loss
        ...     def configure_optimizers(self):
        ...         return torch.optim.Adam(self.parameters(), lr=1e-3)
        >>> Classifier().hparams.hidden
        32
    """

    # Declared for the type checker, which would otherwise read them through nn.Module.__getattr__.
    _trainer: TrainerView | None
    _log_collector: Any
    # Who answers self.trainer, self.log, self.optimizers()...: the Trainer, or the Fabric that set the
    # module up (module_host.py; chosen by ``_fabric``'s setter, which Fabric's setup assigns).
    _host: ModuleHost = TRAINER_HOST
    _fabric_optimizers: Any = ()  # set by trainmesh.Fabric's setup, as Lightning's Fabric sets it
    # Python objects TorchScript must not try to type (to_torchscript).
    __jit_ignored_attributes__ = ["_trainer", "_log_collector", "_host", "_fabric_optimizers"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Plain attributes set through object.__setattr__ so nn.Module does not try to register
        # a Trainer as a submodule or parameter.
        object.__setattr__(self, "_trainer", None)
        object.__setattr__(self, "_log_collector", None)
        # As Lightning's HyperparametersMixin.__init__ (1.9.5 and 2.6): hparams saved before
        # super().__init__() are kept (self.hparams creates them on first use), and not logged
        object.__setattr__(self, "_log_hyperparams", False)

    # ---- hooks a user overrides -------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} has no training_step(batch, batch_idx): define it to return "
            "the loss tensor (or a dict with a 'loss' key)"
        )

    def validation_step(self, *args: Any, **kwargs: Any) -> Any: ...  # Lightning's signatures: super() takes any
    def test_step(self, *args: Any, **kwargs: Any) -> Any: ...

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """By default the forward pass on the whole batch, as Lightning's (``forward(batch)``)."""
        batch = kwargs.get("batch", args[0] if args else None)
        return self(batch)

    def configure_optimizers(self) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} has no configure_optimizers(): return an optimizer, "
            "([optimizers], [schedulers]) or {'optimizer': ..., 'lr_scheduler': ...}"
        )

    def configure_ddp(self, model: nn.Module, device_ids: list[int] | None) -> nn.Module | None:
        """Return your own DDP wrapper around ``model`` (ddp, ddp_spawn, ddp2), or None for
        trainmesh's. ``model`` forwards the Trainer's step calls to this module: wrap it as is.

        >>> # def configure_ddp(self, model, device_ids):
        >>> #     return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=True)
        """
        return None

    def tensor_parallel_plan(self) -> dict[str, Any] | None:
        """How tensor parallelism splits this model: ``{submodule name: ParallelStyle}`` (torch's
        ``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``...; names may be fnmatch
        patterns like ``"layers.*.up"``). None: no plan (a strategy with tp > 1 then asks for one,
        unless ``configure_model(mesh)`` applied ``parallelize_module`` itself)."""
        return None

    def pipeline_input(self, batch: Any) -> Any:
        """What the first pipeline stage receives from a batch: the model's input, the one
        ``training_step`` passes to ``self(...)``. By default the batch's first element (or the
        batch, when it is a tensor); override it for other batch forms."""
        if isinstance(batch, torch.Tensor):
            return batch
        if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
            return batch[0]
        raise TypeError(
            f"{type(self).__name__}.pipeline_input cannot tell the model's input in a batch of type "
            f"{type(batch).__name__}; override pipeline_input(batch) to return the tensor training_step passes to self(...)"
        )

    def pipeline_kwargs(self, batch: Any) -> dict[str, Any]:
        """Keyword inputs that every pipeline stage's forward receives besides its activations
        (attention masks, position ids, document ids): ``self(pipeline_input(batch), **these)``.
        Each tensor is cut into micro-batches along its first dimension, as the input is, so
        each must have one row per sample. None by default.

        >>> # def forward(self, tokens, *, positions): ...
        >>> # def pipeline_kwargs(self, batch):
        >>> #     tokens, targets, positions = batch
        >>> #     return {"positions": positions}
        """
        return {}

    # The model's mode around evaluation, Lightning's defaults: the eval hook runs before
    # on_*_start, the train hook after on_*_end (where not overridden, each submodule gets back
    # its own mode instead); zero_grad before a validation inside fit, outside accumulation.
    def on_validation_model_zero_grad(self) -> None:
        self.zero_grad()

    def on_validation_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_validation_model_train(self) -> None:
        self.trainer.model.train()

    def on_test_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_test_model_train(self) -> None:
        self.trainer.model.train()

    def on_predict_model_eval(self) -> None:
        self.trainer.model.eval()

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip before each optimizer step (after on_before_optimizer_step), given the Trainer's settings."""
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    # log, log_dict, log_grad_norm: trainmesh.module_log_calls.LogCalls
    # save_hyperparameters() and hparams: trainmesh.hyperparameters.HyperparametersMixin

    # ---- where the module is running --------------------------------------------------------
    @property
    def trainer(self) -> TrainerView:
        trainer: TrainerView = self._host.trainer(self)  # under Fabric, Lightning's shim over the Fabric
        return trainer

    @trainer.setter
    def trainer(self, trainer: TrainerView | None) -> None:
        # Lightning's setter: the submodules that are Lightning modules too point at the same Trainer.
        for child in self.children():
            if isinstance(child, Module):
                child.trainer = trainer
        object.__setattr__(self, "_trainer", trainer)
        if trainer is None:  # detached: self.log warns and drops, as Lightning's without a Trainer
            object.__setattr__(self, "_log_collector", None)

    @property
    def fabric(self) -> Any:
        """The ``trainmesh.Fabric`` that set this module up, else None (Lightning's ``LightningModule.fabric``)."""
        return self._fabric

    @fabric.setter
    def fabric(self, fabric: Any) -> None:
        # Lightning's setter: the Lightning submodules too, and a weak proxy (Fabric's setup assigns _fabric itself)
        for child in self.children():
            if isinstance(child, Module):
                child.fabric = fabric
        if fabric is not None and not isinstance(fabric, weakref.ProxyTypes):
            fabric = weakref.proxy(fabric)
        self._fabric = fabric

    @property
    def _fabric(self) -> Any:
        return self._host.fabric

    @_fabric.setter
    def _fabric(self, fabric: Any) -> None:
        object.__setattr__(self, "_host", TRAINER_HOST if fabric is None else FabricHost(fabric))

    @property
    def device(self) -> torch.device:
        for parameter in self.parameters():
            return parameter.device
        for buffer in self.buffers():
            return buffer.device
        return torch.device("cpu")

    @property
    def on_gpu(self) -> bool:
        """Whether the module is on a CUDA device (Lightning's ``on_gpu``)."""
        return self.device.type == "cuda"

    @property
    def global_rank(self) -> int:
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def world_size(self) -> int:
        return self._trainer.world_size if self._trainer is not None else 1

    @property
    def current_epoch(self) -> int:
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger, or None (no Trainer, or ``logger=False``).

        >>> # self.logger.experiment.add_image("samples", grid, self.global_step)
        """
        return self._host.logger(self)

    @property
    def loggers(self) -> list[Any]:
        """Every logger of the Trainer (empty without a Trainer or with ``logger=False``)."""
        return self._host.loggers(self)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather ``data`` (tensors in any nesting) from every process, stacked on a new dim 0, as
        Lightning's: without a process group (one process: the single-device and dp strategies)
        ``data`` comes back as it is; under ddp, even on one process, stacked.

        Args:
            data: a tensor, or a collection of them (other values are kept as they are).
            group: a torch process group to gather over (default: every data-parallel process).
            sync_grads: let gradients flow back through the gather (e.g. a contrastive loss over
                every process's embeddings): each process's slice gets the sum of the processes'
                gradients for it.

        Examples:
            >>> # embeddings = self.all_gather(z, sync_grads=True).flatten(0, 1)
        """
        return self._host.all_gather(self, data, group, sync_grads)

    # optimizers(), manual_backward(), toggle_optimizer(), clip_gradients()...: trainmesh.module_manual_optimization

    def _tm_attach(self, trainer: TrainerView, log_collector: Any) -> None:
        """Point the module at the running Trainer (called by the Trainer, not by users). Private, as
        Lightning's LightningModule has no such public method: a program's own ``attach`` is its own."""
        self.trainer = trainer  # (the setter: submodules that are Lightning modules too, as Lightning's)
        object.__setattr__(self, "_log_collector", log_collector)
        if self.hparams:  # Lightning's _run drops, with a warning, what no checkpoint could pickle
            from trainmesh.utilities.parsing import clean_namespace  # here: a plain fit does not import it

            clean_namespace(self.hparams)

    def __getstate__(self) -> dict[str, Any]:
        # A module travels to spawned processes and into pickled checkpoints without its Trainer.
        state = self.__dict__.copy()
        state["_trainer"] = None
        state["_log_collector"] = None
        return state

    @_restricted_classmethod  # Lightning's: called on an instance, a TypeError
    def load_from_checkpoint(
        cls,
        checkpoint_path: str,
        map_location: Any = "cpu",
        hparams_file: str | os.PathLike | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **overrides: Any,
    ) -> Module:
        """Build the module from the hyperparameters saved in a checkpoint and load its weights.

        ``overrides`` replace saved hyperparameters; ``strict`` (None: the module's ``strict_loading``) and
        ``on_load_checkpoint`` as Lightning's; ``weights_only`` goes to ``torch.load`` (None: torch's default).
        ``hparams_file`` (a logger's ``hparams.yaml``, or a ``tags.csv``) replaces the saved hyperparameters, as in Lightning.

        >>> # model = Classifier.load_from_checkpoint("best.ckpt", map_location="cpu", hidden=64)
        """
        checkpoint = read_saved_checkpoint(
            checkpoint_path, map_location, hparams_file, weights_only, hparams_key=cls.CHECKPOINT_HYPER_PARAMS_KEY
        )
        module = cls(**constructor_arguments(cls, checkpoint, overrides, past_keys=PAST_HPARAMS_KEYS))
        if configure_model_is_a_hook(module):  # Lightning 2.6's _load_state: only where overridden
            call_configure_model(module, None)
        hyperparameters.load_saved_weights(module, checkpoint, strict=strict, checkpoint_path=checkpoint_path)
        return module


# Read by torch.jit.script (to_torchscript): these properties are skipped, not compiled.
Module.__jit_unused_properties__ = trainer_side_properties(Module)  # type: ignore[attr-defined]
