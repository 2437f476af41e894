"""A Module set up by ``trainmesh.Fabric`` (Lightning's LightningModule under Fabric).

Fabric's ``setup`` sets ``module._fabric`` (and ``_fabric_optimizers``) on a LightningModule: from then on
Lightning's ``self.log``/``self.log_dict`` go to ``fabric.log_dict``, ``self.trainer`` answers from the
Fabric, ``self.optimizers()`` returns Fabric's optimizers and ``manual_backward``/``backward`` call
``fabric.backward``. These helpers are those branches, kept out of module.py.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch


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


def fabric_optimizers(optimizers: list[Any]) -> Any:
    """``self.optimizers()`` under Fabric: the one optimizer alone, else the list."""
    return optimizers[0] if len(optimizers) == 1 else optimizers
