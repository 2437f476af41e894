"""A Module set up by ``trainmesh.Fabric`` (Lightning's LightningModule under Fabric): ``FabricHost``.

Fabric's ``setup`` sets ``module._fabric`` (and ``_fabric_optimizers``) on a LightningModule, which makes
this its host (module_host.py): from then on Lightning's ``self.log``/``self.log_dict`` go to
``fabric.log_dict``, ``self.trainer`` answers from the Fabric, ``self.optimizers()`` returns Fabric's
optimizers, ``manual_backward``/``backward`` call ``fabric.backward``, ``clip_gradients`` calls
``fabric.clip_gradients`` and ``all_gather`` Fabric's, each as Lightning's "if self._fabric" branch.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch


class FabricHost:
    """Lightning's answers of a LightningModule set up by ``fabric`` (the members of module_host.ModuleHost)."""

    def __init__(self, fabric: Any) -> None:
        self.fabric = fabric

    def trainer(self, module: Any) -> Any:
        return _TrainerFabricShim(self.fabric)

    def log(self, module: Any, name: str, value: Any, options: dict[str, Any]) -> None:
        log_through_fabric(self.fabric, {name: value}, options["logger"])

    def log_dict(self, module: Any, dictionary: Mapping[str, Any], options: dict[str, Any]) -> None:
        log_through_fabric(self.fabric, dictionary, options["logger"])  # Lightning's: one fabric.log_dict call

    def logger(self, module: Any) -> Any:
        return self.fabric.logger

    def loggers(self, module: Any) -> list[Any]:
        loggers: list[Any] = self.fabric.loggers
        return loggers

    def optimizers(self, module: Any, use_pl_optimizer: bool) -> Any:
        optimizers = list(module._fabric_optimizers)  # the one optimizer alone, else the list
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def manual_backward(self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fabric.backward(loss, *args, **kwargs)

    def backward(self, module: Any, loss: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fabric.backward(loss, *args, **kwargs)

    def print(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # Lightning's reads self.trainer.progress_bar_callback on rank 0, which the shim does not have:
        # the shim's AttributeError there, nothing printed elsewhere
        shim = self.trainer(module)
        if shim.is_global_zero:
            _ = shim.progress_bar_callback

    def clip_gradients(self, module: Any, optimizer: Any, value: float | None, algorithm: str | None) -> Any:
        by_value = algorithm is not None and str(getattr(algorithm, "value", algorithm)).lower() == "value"
        self.fabric.clip_gradients(
            module, optimizer, clip_val=value if by_value else None, max_norm=None if by_value else value
        )  # Lightning's returns nothing here

    def all_gather(self, module: Any, data: Any, group: Any, sync_grads: bool) -> Any:
        return self.fabric.all_gather(data, group=group, sync_grads=sync_grads)  # the strategy's, as Lightning's


class _TrainerFabricShim:
    """Lightning's ``_TrainerFabricShim``: ``self.trainer.x`` reads ``fabric.x``."""

    def __init__(self, fabric: Any) -> None:
        self._fabric = fabric

    def __getattr__(self, item: str) -> Any:
        try:
            return getattr(self._fabric, item)
        except AttributeError:
            raise AttributeError(
                f"Your LightningModule code tried to access `self.trainer.{item}` but this attribute is not available"
                f" when using Fabric with a LightningModule."
            ) from None


def log_through_fabric(fabric: Any, dictionary: Mapping[str, Any], logger: bool | None) -> None:
    """Lightning's ``_log_dict_through_fabric``: same checks, same words, then ``fabric.log_dict``."""
    if logger is False:  # Lightning's: no other destination under Fabric, so nothing is logged
        return
    if any(isinstance(value, dict) for value in dictionary.values()):
        raise ValueError(f"`self.log_dict({dictionary})` was called, but nested dictionaries cannot be logged")
    for name, value in dictionary.items():
        for leaf in _leaves(value):
            if not isinstance(leaf, (numbers.Number, torch.Tensor)):
                raise ValueError(
                    f"`self.log({name}, {value})` was called, but `{type(leaf).__name__}` values cannot be logged"
                )
    fabric.log_dict(metrics=dictionary)


def _leaves(value: Any) -> list[Any]:
    # apply_to_collection's walk: lists, tuples and mappings are opened, everything else is a leaf
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
