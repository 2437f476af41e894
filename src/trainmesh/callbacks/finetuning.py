"""Lightning's finetuning callbacks, as Lightning 2.6 defines them (its ``callbacks/finetuning.py``):
``BaseFinetuning`` freezes modules before ``configure_optimizers`` (``freeze_before_training``) and
unfreezes them at an epoch's start (``finetune_function``), adding their parameters to the live
optimizer as a new param group (``unfreeze_and_add_param_group``); ``BackboneFinetuning`` does so for
``module.backbone`` at ``unfreeze_backbone_at_epoch`` and raises its learning rate each epoch after.
The param groups it adds are kept in its checkpoint state and rebuilt on resume.

>>> class Unfreeze(BaseFinetuning):
...     def freeze_before_training(self, module):
...         self.freeze(module.backbone)
...     def finetune_function(self, module, epoch, optimizer):
...         if epoch == 2:
...             self.unfreeze_and_add_param_group(module.backbone, optimizer)
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Generator, Iterable
from typing import Any

import torch
from torch.nn import Module, ModuleDict
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.optimizer import Optimizer

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.refusal import LightningOneName

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers

Modules = Module | Iterable[Any]


def multiplicative(epoch: int) -> float:
    return 2.0


class BaseFinetuning(Callback):
    """Override ``freeze_before_training`` (called in ``setup``, before ``configure_optimizers``:
    filter the optimizer's parameters on ``requires_grad``) and ``finetune_function`` (called at
    every training epoch's start, once per optimizer).

    One process only: a data-parallel strategy synchronizes (and a sharding one shards) the
    parameters that train when it prepares the model, after ``setup``; a parameter unfrozen later
    would train on each process's own gradients, and the processes' models would drift apart
    silently. So it is refused under several processes, or a strategy that shards parameters,
    before training.

    Examples:
        >>> class Unfreeze(BaseFinetuning):
        ...     def freeze_before_training(self, module):
        ...         self.freeze(module.backbone)
        ...     def finetune_function(self, module, epoch, optimizer):
        ...         if epoch == 1:
        ...             self.unfreeze_and_add_param_group(module.backbone, optimizer)
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        if "internal_optimizer_metadata" in state_dict:  # noqa: SIM401
            self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]
        else:  # Lightning's checkpoints from before its PR #11887
            self._internal_optimizer_metadata = state_dict  # type: ignore[assignment]

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        """On resume: the param groups of the run that saved, rebuilt before the optimizers' states load."""
        if self._restarting:
            if self._internal_optimizer_metadata:
                named_parameters = dict(pl_module.named_parameters())
                for opt_idx, optimizer in enumerate(trainer.optimizers):
                    if opt_idx in self._internal_optimizer_metadata:
                        param_groups = self._apply_mapping_to_param_groups(
                            self._internal_optimizer_metadata[opt_idx], named_parameters
                        )
                        configured = len(optimizer.param_groups)
                        # On the optimizer itself: the Trainer's wrapper would take the attribute as its own.
                        optimizer.param_groups = param_groups
                        if not getattr(trainer, "_named_resume", False):
                            _unfreeze_added(param_groups[configured:])
            self._restarting = False

    @staticmethod
    def flatten_modules(modules: Modules) -> list[Module]:
        """The leaf modules of ``modules`` (a module or an iterable of them), and the parent
        modules that hold parameters themselves."""
        if isinstance(modules, ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            flat: list[Module] = []
            for m in modules:
                flat.extend(BaseFinetuning.flatten_modules(m))
            found: Iterable[Module] = iter(flat)
        else:
            found = modules.modules()
        return [m for m in found if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Generator[Any]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (batch norms'
        left out unless ``train_bn``)."""
        for mod in BaseFinetuning.flatten_modules(modules):
            if isinstance(mod, _BatchNorm) and not train_bn:
                continue
            for param in mod.parameters(recurse=False):  # not recursive: a parent's would repeat
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: Module) -> None:
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their batch norms stay trainable."""
        for mod in BaseFinetuning.flatten_modules(modules):
            if isinstance(mod, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(mod)
            else:
                BaseFinetuning.freeze_module(mod)

    @staticmethod
    def filter_on_optimizer(optimizer: Optimizer, params: Iterable[Any]) -> list[Any]:
        """``params`` less those already in ``optimizer`` (compared by value, as Lightning does)."""
        out_params, removed_params = [], []
        for param in params:
            if not any(torch.equal(p, param) for group in optimizer.param_groups for p in group["params"]):
                out_params.append(param)
            else:
                removed_params.append(param)
        if removed_params:
            rank_zero_warn(
                "The provided params to be frozen already exist within another group of this optimizer."
                " Those parameters will be skipped.\n"
                "HINT: Did you init your optimizer in `configure_optimizer` as such:\n"
                f" {type(optimizer)}(filter(lambda p: p.requires_grad, self.parameters()), ...) ",
            )
        return out_params

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new group, at ``lr``
        (default: the first group's divided by ``initial_denom_lr``)."""
        BaseFinetuning.make_trainable(modules)
        params_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denom_lr = initial_denom_lr if lr is None else 1.0
        params = BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        kept = BaseFinetuning.filter_on_optimizer(optimizer, params)
        if kept:
            optimizer.add_param_group({"params": kept, "lr": params_lr / denom_lr})

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        _refuse_parallel(trainer, type(self).__name__)
        self.freeze_before_training(pl_module)

    @staticmethod
    def _apply_mapping_to_param_groups(
        param_groups: list[dict[str, Any]], mapping: dict[Any, Any]
    ) -> list[dict[str, Any]]:
        output = []
        for g in param_groups:
            group_state = {k: v for k, v in g.items() if k != "params"}  # the tensors are not kept
            group_state["params"] = [mapping[p] for p in g["params"]]
            output.append(group_state)
        return output

    def _store(
        self, module: Any, opt_idx: int, num_param_groups: int, current_param_groups: list[dict[str, Any]]
    ) -> None:
        mapping = {p: n for n, p in module.named_parameters()}
        if opt_idx not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[opt_idx] = self._apply_mapping_to_param_groups(
                current_param_groups, mapping
            )
        elif num_param_groups != len(current_param_groups):  # groups the user added since
            self._internal_optimizer_metadata[opt_idx].extend(
                self._apply_mapping_to_param_groups(current_param_groups[num_param_groups:], mapping)
            )

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        takes_opt_idx = _takes_opt_idx(self.finetune_function)
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            num_param_groups = len(optimizer.param_groups)
            if takes_opt_idx:  # Lightning 1.x's finetune_function(pl_module, epoch, optimizer, opt_idx)
                self.finetune_function(pl_module, trainer.current_epoch, optimizer, opt_idx)
            else:
                self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, opt_idx, num_param_groups, optimizer.param_groups)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer, opt_idx: int | None = None) -> None:
        """Override to add your unfreeze logic. ``opt_idx`` is Lightning 1.x's fourth argument: an
        override that requires it gets the optimizer's index, as 1.x passed it."""
        raise NotImplementedError

    def freeze_before_training(self, pl_module: Any) -> None:
        """Override to add your freeze logic."""
        raise NotImplementedError


def _unfreeze_added(groups: list[dict[str, Any]]) -> None:
    """trainmesh's exact resume (``Trainer(exact_resume=True)``, an automatic restart): the groups
    finetuning added train, as in the fit that never stopped. Lightning 2.6's resume, which a
    ``ckpt_path`` the program names follows, rebuilds them but leaves their parameters as
    ``freeze_before_training`` left them, frozen: the resumed fit never trains them (their learning
    rate still grows), and so trainmesh's named resume does not either (its weights are Lightning's:
    tests/callbacks/test_finetuning.py)."""
    for group in groups:
        for param in group["params"]:
            param.requires_grad = True


def _refuse_parallel(trainer: TrainerView, name: str) -> None:
    capabilities = trainer.runtime.capabilities
    if trainer.world_size > 1 or capabilities.shards_parameters:
        raise ValueError(
            f"{name} unfreezes parameters during fit, and this run has {trainer.world_size} processes"
            f"{' and a strategy that shards parameters' if capabilities.shards_parameters else ''}: the strategy "
            "synchronizes (or shards) only the parameters that train when it prepares the model, after setup, so "
            "parameters unfrozen later would train on each process's own gradients and the processes' models would "
            "drift apart. Finetune on one process (devices=1, strategy='auto' or 'single'), or unfreeze before fit"
        )


class BackboneFinetuning(BaseFinetuning):
    """Finetune ``module.backbone``: frozen until ``unfreeze_backbone_at_epoch``, then trained at
    ``backbone_initial_lr`` (default: the current lr times ``backbone_initial_ratio_lr``), multiplied
    by ``lambda_func(epoch + 1)`` each epoch after, aligned with the current lr once it reaches it
    (``should_align``).

    Args:
        unfreeze_backbone_at_epoch: the epoch at which ``module.backbone`` is unfrozen (default ``10``).
        lambda_func: the backbone's lr multiplier per epoch after that.
        backbone_initial_ratio_lr: the backbone's first lr, as a ratio of the optimizer's (default ``0.1``).
        backbone_initial_lr: the backbone's first lr (None: from the ratio) (default ``None``).
        should_align: align the backbone's lr with the optimizer's once it catches up (default ``True``).
        initial_denom_lr: the denominator of the lr the unfrozen groups start at (default ``10.0``).
        train_bn: train the backbone's batch norms while it is frozen (default ``True``).
        verbose: print the lrs each epoch (default ``False``).
        rounding: decimals the printed lrs are rounded to (default ``12``).

    Examples:
        >>> finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1.5)
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "internal_optimizer_metadata": self._internal_optimizer_metadata,
            "previous_backbone_lr": self.previous_backbone_lr,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if hasattr(pl_module, "backbone") and isinstance(pl_module.backbone, Module):
            return super().on_fit_start(trainer, pl_module)
        raise ValueError(
            f"BackboneFinetuning finetunes `module.backbone`, and {type(pl_module).__name__} has no nn.Module "
            "`backbone` attribute: name the part to finetune `self.backbone`, or write a BaseFinetuning subclass"
        )

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Optimizer, opt_idx: int | None = None) -> None:
        if epoch == self.unfreeze_backbone_at_epoch:
            current_lr = optimizer.param_groups[0]["lr"]
            initial_backbone_lr = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.previous_backbone_lr = initial_backbone_lr
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                initial_backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
            self._report(current_lr, initial_backbone_lr)
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None  # set at the unfreezing epoch, or restored
            current_lr = optimizer.param_groups[0]["lr"]
            next_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            next_lr = current_lr if (self.should_align and next_lr > current_lr) else next_lr
            optimizer.param_groups[-1]["lr"] = next_lr
            self.previous_backbone_lr = next_lr
            self._report(current_lr, next_lr)

    def _report(self, current_lr: float, backbone_lr: float) -> None:
        if self.verbose:
            log.info(
                f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(backbone_lr, self.rounding)}"
            )


def _takes_opt_idx(finetune_function: Callable[..., Any]) -> bool:
    """Whether an override is Lightning 1.x's ``finetune_function(pl_module, epoch, optimizer, opt_idx)``
    (a fourth positional parameter without a default), which 1.x called with the optimizer's index;
    said once per run with today's signature."""
    try:
        parameters = list(inspect.signature(finetune_function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 4 or positional[3].default is not inspect.Parameter.empty:
        return False
    warnings.warn(
        "finetune_function(pl_module, epoch, optimizer, opt_idx) is Lightning 1.x's signature; today: "
        "finetune_function(pl_module, epoch, optimizer) (the optimizer's index is still passed here)",
        LightningOneName,
        stacklevel=3,
    )
    return True
