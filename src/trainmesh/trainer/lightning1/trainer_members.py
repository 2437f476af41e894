"""The Trainer's members of pytorch-lightning 1.9.5 that 2.0 removed, answering as 1.9.5 answers on the
same program (``tests/helpers/lightning_1_9_trainer.json`` records 1.9.5's, compared in
``tests/trainer/test_lightning1_members.py``): ``resume_from_checkpoint``, ``tune`` and ``tuning``,
``amp_backend``, ``data_parallel``, ``optimizer_frequencies``, ``prediction_writer_callbacks``,
``default_attributes``, ``match_env_arguments`` and the argparse classmethods.

The members Lightning 1.8 had already removed (``gpus``, ``num_gpus``, ``root_gpu``, ``use_amp``,
``call_hook``, ...) raise in 1.9.5 (its ``_graveyard``): here they raise the same exception type,
naming what trainmesh has instead (``GRAVEYARD``). The Trainer enters this module through
``trainer/construction.py`` (docs/architecture.md rule 10).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from argparse import ArgumentParser, Namespace
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainmesh.model_configuration import is_lightning1_module
from trainmesh.trainer.lightning1.accumulation import apply_epoch_factor as apply_epoch_factor  # (construction)
from trainmesh.trainer.lightning1.accumulation import listed_scheduler
from trainmesh.trainer.lightning1.accumulation import with_accumulation_scheduler as with_accumulation_scheduler
from trainmesh.trainer.lightning1.grad_norm import GradNormTracking, check_norm_type
from trainmesh.trainer.lightning1.legacy_arguments import OLD_ARGUMENTS
from trainmesh.trainer.lightning1.one_run import LightningOneRun
from trainmesh.trainer.lightning1.trainer_arguments import LIGHTNING1_ARGUMENTS, resume_notice
from trainmesh.trainer.plugins_argument import is_strategy, listed
from trainmesh.trainer.run_properties import RunProperties
from trainmesh.utilities.refusal import LightningOneName

if TYPE_CHECKING:
    from trainmesh.trainer.data_source import DataSource
    from trainmesh.trainer.loop_state import LoopState

# Trainer members pytorch-lightning 1.8 removed: 1.9.5 raises (AttributeError for a property,
# NotImplementedError for a method); here the same, with what to use in trainmesh.
_REMOVED = "was removed in Lightning 1.8 (pytorch-lightning 1.9.5 raises here too)"
_DEVICES = "trainer.world_size (processes) and trainer.runtime.device_indices (this node's devices)"
GRAVEYARD_PROPERTIES = {
    "gpus": _DEVICES,
    "num_gpus": _DEVICES,
    "devices": _DEVICES,
    "tpu_cores": _DEVICES + "; trainmesh runs on CPU and CUDA, no TPUs",
    "ipus": _DEVICES + "; trainmesh runs on CPU and CUDA, no IPUs",
    "root_gpu": "trainer.runtime.device.index",
    "use_amp": "trainer.precision (for instance '16-mixed')",
    "weights_save_path": "trainer.default_root_dir, or ModelCheckpoint(dirpath=...)",
    "lightning_optimizers": "trainer.optimizers",
    "should_rank_save_checkpoint": "trainer.is_global_zero",
    "validated_ckpt_path": "trainer.ckpt_path",
    "tested_ckpt_path": "trainer.ckpt_path",
    "predicted_ckpt_path": "trainer.ckpt_path",
    "verbose_evaluate": "trainer.validate(..., verbose=) / trainer.test(..., verbose=)",
    "training_type_plugin": "trainer.strategy",
}
GRAVEYARD_METHODS = {
    "run_stage": "trainer.fit / validate / test / predict",
    "call_hook": "the hooks run where the loop calls them; call a hook of your own module directly",
    "prepare_dataloader": "return the DataLoader from *_dataloader(); the Trainer adds the distributed sampler",
    "request_dataloader": "the Trainer asks the module or data module for its loaders where Lightning does",
    "init_optimizers": "the Trainer calls configure_optimizers at fit's start",
    "convert_to_lightning_optimizers": "trainer.optimizers (optimizer_step receives the wrapped optimizer)",
    "reset_train_val_dataloaders": "the Trainer builds fit's loaders at its start",
}
# 1.9.5 has these (they load a stage's loaders onto the Trainer); 2.0 removed them. trainmesh asks for each
# stage's loaders where Lightning 2 does and keeps no loader on the Trainer to reload.
_RELOADS = "(pytorch-lightning 1.9.5 loads the loaders here; Lightning 2.0 removed it)"
RELOAD_METHODS = {
    "reset_train_dataloader": "fit asks for train_dataloader() at its start, as Lightning 2 does",
    "reset_val_dataloader": "fit and validate ask for val_dataloader() where Lightning 2 does",
    "reset_test_dataloader": "test asks for test_dataloader() at its start",
    "reset_predict_dataloader": "predict asks for predict_dataloader() at its start",
}


def _removed_property(name: str, instead: str) -> property:
    reason = f"`Trainer.{name}` {_REMOVED}; in trainmesh: {instead}"

    def removed(self: Any) -> Any:
        raise AttributeError(reason)

    removed.__refused__ = reason  # type: ignore[attr-defined]  # read by the API inventory
    return property(removed, doc=f"Refused: {reason}")


def _removed_method(name: str, instead: str, removed_when: str = _REMOVED) -> Any:
    reason = f"`Trainer.{name}` {removed_when}; in trainmesh: {instead}"

    def removed(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(reason)

    removed.__refused__ = reason  # type: ignore[attr-defined]
    removed.__doc__ = f"Refused: {reason}"
    return removed


# pytorch-lightning 1.9.5's trainer.precision (its precision plugin's ``precision``: "32", "64", and str(16) or
# "bf16" for its MixedPrecisionPlugin) for each of Lightning 2's names (tests/helpers/lightning_1_9_run_generation.json);
# "16-true" and "bf16-true", which 1.9.5 had not, keep 2.6's.
LIGHTNING1_PRECISIONS = {"32-true": "32", "64-true": "64", "16-mixed": "16", "bf16-mixed": "bf16"}

_TRAIN_LOADER_MODES = ("max_size_cycle", "min_size")  # 1.9.5's CombinedLoader modes for fit


# Each Trainer argument only pytorch-lightning 1.x has, with its 1.x default: one given another value makes
# the run 1.x's (written_for_lightning1).
LIGHTNING1_ONLY_DEFAULTS: dict[str, Any] = {
    **OLD_ARGUMENTS,
    **LIGHTNING1_ARGUMENTS,
    "resume_from_checkpoint": None,
    "move_metrics_to_cpu": False,
    "multiple_trainloader_mode": "max_size_cycle",
}


def lightning_one_run(arguments: dict[str, Any]) -> LightningOneRun:
    """What the Trainer keeps of the 1.x arguments among its constructor's ``arguments``."""
    mode = arguments["multiple_trainloader_mode"]
    if mode not in _TRAIN_LOADER_MODES:
        raise ValueError(
            f"Trainer(multiple_trainloader_mode={mode!r}): Lightning 1.x's modes are {list(_TRAIN_LOADER_MODES)} "
            "(several train loaders read until the longest one ends, the shorter ones cycled, or until the shortest)"
        )
    check_norm_type(arguments["track_grad_norm"])
    resume_notice(arguments["resume_from_checkpoint"])
    names = (
        "resume_from_checkpoint",
        "auto_lr_find",
        "auto_scale_batch_size",
        "move_metrics_to_cpu",
        "track_grad_norm",
    )
    spelled = any(arguments[name] != default for name, default in LIGHTNING1_ONLY_DEFAULTS.items())
    spelled = spelled or lightning1_plugins(arguments["plugins"], arguments["strategy"])
    return LightningOneRun(multiple_trainloader_mode=mode, spelled=spelled, **{name: arguments[name] for name in names})


def lightning1_plugins(plugins: Any, strategy: Any) -> bool:
    """Whether ``Trainer(plugins=, strategy=)`` is spelled as only Lightning 1.x spelled it: a strategy in
    ``plugins`` (``DDPPlugin(...)``, ``"ddp_sharded"``), or an object made by a 1.x plugin name
    (``strategy=DDPPlugin()``, ``NativeMixedPrecisionPlugin(...)``: plugins/lightning1.py)."""
    given = listed(plugins)
    # a program that made nothing by a 1.x name never imported that module (it is not imported here)
    named = sys.modules.get("trainmesh.plugins.lightning1")
    made = named is not None and any(named.made_by_lightning1_name(value) for value in [*given, strategy])
    return made or any(is_strategy(plugin) for plugin in given)


def written_for_lightning1(trainer: LightningOneMembers, module: Any) -> bool:
    """Whether this run follows pytorch-lightning 1.9.5 (its RNG timing, autocast cache, csv columns, ...):
    the Trainer was built with a spelling only 1.x has (``Trainer(gpus=0)``, ``resume_from_checkpoint=``,
    ``Trainer.from_argparse_args``: Lightning 2 refuses the program, so 1.9.5 is its only owner), or
    ``module`` defines a hook Lightning 2.0 removed (``model_configuration.is_lightning1_module``)."""
    return trainer._lightning1.spelled or is_lightning1_module(module)


def lightning_one_fit(trainer: LightningOneMembers, data: DataSource, ckpt_path: Any) -> Any:
    """At fit's start: the train loaders' mode on ``data`` (and whether a search validates first); the
    gradient norms' callback (``track_grad_norm``);
    the checkpoint to resume from (``ckpt_path``, else ``resume_from_checkpoint``'s, as 1.9.5's ``fit``)."""
    run, state = trainer._lightning1, trainer._state
    data.train_mode = run.multiple_trainloader_mode
    # 1.9.5's tuner runs its searches' fit loop from a restored state: the restarting epoch loop finds a
    # validation check due before the first batch (batch_idx -1) and validates first (2.x skips it)
    data.validate_first = run.tuning
    if run.track_grad_norm != -1 and not any(isinstance(cb, GradNormTracking) for cb in trainer.callbacks):
        trainer.callbacks.append(GradNormTracking(run.track_grad_norm))
    _settle_resume(run, state)
    # trainer.tune's searches start from the model as it is (1.9.5's tuner runs no fit, so no resume)
    if ckpt_path is not None or run.resume_from_checkpoint is None or run.tuning:
        return ckpt_path
    run.resuming = True
    return run.resume_from_checkpoint


class LightningOneMembers(RunProperties):
    """The 1.9.5 members of the Trainer (a base class of it)."""

    _lightning1: LightningOneRun
    _state: LoopState

    # 1.x's argparse classmethods (lightning1/argparse_arguments.py), imported by a program that calls one.
    @classmethod
    def add_argparse_args(cls, parent_parser: ArgumentParser, *, use_argument_group: bool = True) -> Any:
        """``parent_parser`` with a ``--name`` option for each Trainer argument a command line can give
        (in a group named after the class; ``use_argument_group=False``: a new parser holding them)."""
        from trainmesh.trainer.lightning1 import argparse_arguments

        return argparse_arguments.add_argparse_args(cls, parent_parser, use_argument_group=use_argument_group)

    @classmethod
    def parse_argparser(cls, arg_parser: ArgumentParser | Namespace) -> Namespace:
        """The parsed command line (``arg_parser.parse_args()``), a flag left without a value as True."""
        from trainmesh.trainer.lightning1 import argparse_arguments

        return argparse_arguments.parse_argparser(cls, arg_parser)

    @classmethod
    def from_argparse_args(cls, args: ArgumentParser | Namespace, **kwargs: Any) -> Any:
        """``cls(...)`` from the parsed arguments that are its own (others are the program's), ``kwargs`` over them."""
        from trainmesh.trainer.lightning1 import argparse_arguments

        made = argparse_arguments.from_argparse_args(cls, args, **kwargs)
        # Lightning 2.0 removed the argparse classmethods: a program calling one was written for 1.x
        # (the Trainer's own state, set as its construction returns; not the program's object)
        made._lightning1.spelled = True
        made.callbacks = with_accumulation_scheduler(made.callbacks, made.accumulate_grad_batches)  # 1.9.5's list
        return made

    @property
    def _written_for_lightning1(self) -> bool:
        """Whether this run follows pytorch-lightning 1.9.5 (:func:`written_for_lightning1`, with the run's module)."""
        return written_for_lightning1(self, self.lightning_module)

    @property
    def precision(self) -> str:
        """The run's precision: pytorch-lightning 1.9.5's name of it in a run written for 1.x (``"32"``,
        ``"bf16"``), else Lightning 2.6's (``"32-true"``, ``"bf16-mixed"``)."""
        name = super().precision
        return LIGHTNING1_PRECISIONS.get(name, name) if self._written_for_lightning1 else name

    locals().update({name: _removed_property(name, instead) for name, instead in GRAVEYARD_PROPERTIES.items()})
    locals().update({name: _removed_method(name, instead) for name, instead in GRAVEYARD_METHODS.items()})
    locals().update({name: _removed_method(name, instead, _RELOADS) for name, instead in RELOAD_METHODS.items()})

    @classmethod
    def default_attributes(cls) -> dict[str, Any]:
        """Each argument of the Trainer's constructor with its default (1.x's ``Trainer.default_attributes()``)."""
        return {k: v.default for k, v in inspect.signature(cls).parameters.items()}

    @classmethod
    def match_env_arguments(cls) -> Namespace:
        """The constructor's arguments given as ``PL_TRAINER_<NAME>`` environment variables (1.x's)."""
        from trainmesh.utilities.argparse import parse_env_variables  # a program that asks imports it

        return parse_env_variables(cls)

    @property
    def resume_from_checkpoint(self) -> str | os.PathLike[str] | None:
        """``Trainer(resume_from_checkpoint=path)``'s path until a fit has restored it (then None), as 1.9.5
        (with its deprecation line)."""
        warnings.warn(
            "trainer.resume_from_checkpoint is Lightning 1.x's; today: trainer.ckpt_path",
            LightningOneName,
            stacklevel=2,
        )
        _settle_resume(self._lightning1, self._state)
        return self._lightning1.resume_from_checkpoint

    # The 1.x arguments 1.9.5 keeps on its Trainer as given (track_grad_norm as a float)
    @property
    def auto_lr_find(self) -> bool | str:
        """``Trainer(auto_lr_find=...)`` as given (1.9.5's attribute)."""
        return self._lightning1.auto_lr_find

    @property
    def auto_scale_batch_size(self) -> bool | str:
        """``Trainer(auto_scale_batch_size=...)`` as given (1.9.5's attribute)."""
        return self._lightning1.auto_scale_batch_size

    @property
    def move_metrics_to_cpu(self) -> bool:
        """``Trainer(move_metrics_to_cpu=...)`` as given (1.9.5's attribute)."""
        return self._lightning1.move_metrics_to_cpu

    @property
    def track_grad_norm(self) -> float:
        """``Trainer(track_grad_norm=p)`` as a float, -1.0 when off (1.9.5's attribute)."""
        return float(self._lightning1.track_grad_norm)

    @property
    def tuner(self) -> Any:
        """1.9.5's ``Tuner`` of this Trainer (``lr_find``, ``scale_batch_size``: lightning1/tuner.py)."""
        from trainmesh.trainer.lightning1.tuner import LightningOneTuner  # a program that asks imports it

        return LightningOneTuner(self)  # type: ignore[arg-type]

    def _lightning1_finder(self, finder: Any) -> Any:
        """The 1.9.5 finder that searches for a program's finder callback in this 1.x run (lightning1/tuner.py)."""
        from trainmesh.trainer.lightning1.tuner import lightning_one_finder  # a run with a finder imports it

        return lightning_one_finder(finder, self.auto_lr_find)

    @property
    def accumulation_scheduler(self) -> Any:
        """The ``GradientAccumulationScheduler`` among the callbacks, else one holding
        ``{0: accumulate_grad_batches}`` (1.9.5 added that one to every Trainer)."""
        from trainmesh.callbacks import GradientAccumulationScheduler

        factor = getattr(self, "accumulate_grad_batches", 1)  # the Trainer's field (trainer_fields.py)
        return listed_scheduler(self.callbacks) or GradientAccumulationScheduler({0: factor})

    def tune(
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        scale_batch_size_kwargs: dict[str, Any] | None = None,
        lr_find_kwargs: dict[str, Any] | None = None,
        method: Literal["fit", "validate", "test", "predict"] = "fit",
    ) -> dict[str, Any]:
        """Lightning 1.x's tuning before training: with ``Trainer(auto_scale_batch_size=True | "power" |
        "binsearch")`` the batch-size search, then with ``Trainer(auto_lr_find=True | "attribute")`` the
        learning-rate finder, whose suggestion is written onto the model's ``lr`` / ``learning_rate``
        (run on trainmesh's ``Tuner``, as 1.9.5 runs them: lightning1/tune.py).

        Args:
            model: the module to tune.
            train_dataloaders: fit's train loaders, or a data module (default ``None``).
            val_dataloaders: fit's validation loaders (default ``None``).
            dataloaders: refused, as 1.9.5's finders for fit refuse it (default ``None``).
            datamodule: the data module (default ``None``).
            scale_batch_size_kwargs: more arguments of ``Tuner.scale_batch_size`` (default ``None``).
            lr_find_kwargs: more arguments of ``Tuner.lr_find`` (default ``None``).
            method: ``"fit"``, the only one the finders run for (default ``"fit"``).

        Returns:
            ``{"scale_batch_size": size found, "lr_find": the finder}``, each only where it ran.

        Examples:
            >>> import trainmesh as tm
            >>> tm.Trainer(auto_lr_find=True, logger=False).tune  # doctest: +ELLIPSIS
            <bound method LightningOneMembers.tune of ...>
        """
        from trainmesh.trainer.lightning1 import tune  # here: a program that never tunes does not import it

        return tune.tune(
            self,  # type: ignore[arg-type]  # the Trainer: the tuner's protocol
            self._lightning1,
            model,
            train_dataloaders,
            val_dataloaders,
            dataloaders,
            datamodule,
            scale_batch_size_kwargs,
            lr_find_kwargs,
            method,
        )

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """Latest value of every logged metric; on the CPU with ``Trainer(move_metrics_to_cpu=True)``."""
        return self._on_cpu(super().callback_metrics)

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What went to the loggers; on the CPU with ``Trainer(move_metrics_to_cpu=True)``."""
        return self._on_cpu(super().logged_metrics)

    def _on_cpu(self, metrics: dict[str, Any]) -> dict[str, Any]:
        if not self._lightning1.move_metrics_to_cpu:
            return metrics
        return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in metrics.items()}

    @property
    def tuning(self) -> bool:
        """True while ``trainer.tune`` runs."""
        return self._lightning1.tuning

    @property
    def amp_backend(self) -> str | None:
        """``"native"`` under a mixed precision (torch's AMP, the only one here), else None (as 1.9.5)."""
        warnings.warn(
            "Trainer.amp_backend is Lightning 1.x's; today: trainer.precision ('16-mixed', 'bf16-mixed')",
            LightningOneName,
            stacklevel=2,
        )
        return "native" if self.runtime.precision.name.endswith("-mixed") else None

    @property
    def data_parallel(self) -> bool:
        """Whether the strategy is one of Lightning's ``ParallelStrategy`` kinds (ddp, fsdp, dp, ...)."""
        return self.runtime.trainer_port.parallel

    @property
    def optimizer_frequencies(self) -> list[int]:
        """Each optimizer's ``frequency`` as ``configure_optimizers`` gave it ([] when none gave one)."""
        return list(self._state.optimizer_frequencies)

    @property
    def prediction_writer_callbacks(self) -> list[Any]:
        """The Trainer's ``BasePredictionWriter`` callbacks."""
        from trainmesh.callbacks.prediction_writer import BasePredictionWriter

        return [cb for cb in self.callbacks if isinstance(cb, BasePredictionWriter)]


def _settle_resume(run: LightningOneRun, state: LoopState) -> None:
    """1.9.5 forgets the path once a fit has restored from it (its ``resume_end``)."""
    if run.resuming and state.ckpt_path is not None:
        if os.path.abspath(state.ckpt_path) == os.path.abspath(run.resume_from_checkpoint or ""):
            run.resume_from_checkpoint = None
        run.resuming = False
