"""Who answers a Module's questions about the run: its Trainer, or the Fabric that set it up.

A Lightning module asks whoever runs it for ``self.trainer``, ``self.log``, ``self.logger(s)``,
``self.optimizers()``, ``manual_backward``/``backward``, ``self.print``, ``clip_gradients`` and
``all_gather``. Lightning answers each with its own "if self._fabric" branch; here the module holds
one host, chosen when it is attached (``module._fabric = fabric``: Fabric's setup and the ``fabric``
setter), and every such member asks it. ``TrainerHost`` (this module) answers from the Trainer the
module is attached to, or as Lightning without one; ``FabricHost`` (module_fabric.py) as Lightning's
LightningModule under Fabric. The two have the same members, each taking the module first.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, Protocol

import torch

from trainmesh import manual_calls
from trainmesh.module_logging import check_metric_attribute, reduce_fx_name, warn_barebones, warn_no_trainer
from trainmesh.utilities.apply_func import new_convert_to_tensors


class ModuleHost(Protocol):
    """What a Module asks whoever runs it (``module._host``)."""

    @property
    def fabric(self) -> Any: ...  # the Fabric that set the module up (Lightning's ``module._fabric``), else None
    def trainer(self, module: Any) -> Any: ...
    def log(self, module: Any, name: str, value: Any, options: dict[str, Any]) -> None: ...
    def log_dict(self, module: Any, dictionary: Mapping[str, Any], options: dict[str, Any]) -> None: ...
    def logger(self, module: Any) -> Any: ...
    def loggers(self, module: Any) -> list[Any]: ...
    def optimizers(self, module: Any, use_pl_optimizer: bool) -> Any: ...
    def manual_backward(
        self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None: ...
    def backward(self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...
    def print(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...
    def clip_gradients(self, module: Any, optimizer: Any, value: float | None, algorithm: str | None) -> Any: ...
    def all_gather(self, module: Any, data: Any, group: Any, sync_grads: bool) -> Any: ...


class TrainerHost:
    """The Trainer's answers (``module._trainer``; without a Trainer, Lightning's: an error, or nothing)."""

    fabric = None

    def trainer(self, module: Any) -> Any:
        # While to_torchscript compiles, torch reads every property: answer None instead of failing.
        if module._trainer is None and not module.__dict__.get("_jit_is_scripting", False):
            raise RuntimeError(f"{type(module).__qualname__} is not attached to a `Trainer`.")
        return module._trainer

    def log(self, module: Any, name: str, value: Any, options: dict[str, Any]) -> None:
        log_collector = module._log_collector
        if log_collector is None:
            warn_no_trainer(name, attached=module._trainer is not None, stacklevel=4)  # at the line calling self.log
            return
        if log_collector.barebones:
            warn_barebones()
            return
        if options["reduce_fx"] != "mean":  # the default needs no check; this is the hot path of every step
            options["reduce_fx"] = reduce_fx_name(options["reduce_fx"])
        metric_attribute = options.pop("metric_attribute")
        if metric_attribute is None and not isinstance(value, (torch.Tensor, float, int)):
            check_metric_attribute(module, name, value, metric_attribute)  # Lightning's refusal of a stray Metric
        if options["logger"] is None:
            options["logger"] = True
        log_collector.log(name, value, **options)

    def log_dict(self, module: Any, dictionary: Mapping[str, Any], options: dict[str, Any]) -> None:
        for name, value in dictionary.items():  # Lightning's: self.log per item (a program's override included)
            module.log(name, value, **options)

    def logger(self, module: Any) -> Any:
        return module._trainer.logger if module._trainer is not None else None

    def loggers(self, module: Any) -> list[Any]:
        return list(module._trainer.loggers) if module._trainer is not None else []

    def optimizers(self, module: Any, use_pl_optimizer: bool) -> Any:
        return manual_calls.optimizers_of(module.trainer, wrapped=use_pl_optimizer)

    def manual_backward(self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        manual = getattr(module.trainer, "manual_backward", None)
        if manual is None:
            raise RuntimeError(
                f"manual_backward is for manual optimization: set self.automatic_optimization = False in "
                f"{type(module).__name__}.__init__, or return the loss from training_step and let the loop backpropagate"
            )
        manual(loss, *args, **kwargs)

    def backward(self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        loss.backward(*args, **kwargs)

    def print(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        trainer = module._trainer
        if trainer is not None and not trainer.is_global_zero:
            return
        bar = getattr(trainer, "progress_bar_callback", None) if trainer is not None else None
        if bar is not None and hasattr(bar, "print"):
            bar.print(*args, **kwargs)
        else:
            builtins.print(*args, **kwargs)

    def clip_gradients(self, module: Any, optimizer: Any, value: float | None, algorithm: str | None) -> Any:
        # Once for the step, however many parts of it run training_step (dp's chunks).
        trainer = module.trainer
        return manual_calls.sync_of(trainer).once(
            lambda: manual_calls.clip_gradients(trainer, optimizer, value, algorithm), what="clip_gradients()"
        )

    def all_gather(self, module: Any, data: Any, group: Any, sync_grads: bool) -> Any:
        # As Lightning's: numbers (and numpy arrays) in ``data`` become tensors on the module's device
        # first (int32, float32, bool as uint8), so they come back gathered too, not as this rank's
        data = new_convert_to_tensors(data, module.device)
        return module.trainer.runtime.all_gather(data, group=group, sync_grads=sync_grads, stack_alone=False)


TRAINER_HOST = TrainerHost()


def host_of(module: Any) -> ModuleHost:
    """The host of ``module`` (for the Module's mixins, which do not declare it)."""
    host: ModuleHost = getattr(module, "_host", TRAINER_HOST)
    return host
