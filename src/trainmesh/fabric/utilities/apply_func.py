"""``lightning.fabric.utilities.apply_func``: Fabric's ``apply_to_collection``, ``move_data_to_device``,
``convert_to_tensors`` (trainmesh's, without the deprecation warnings that the 1.x module
``trainmesh.utilities.apply_func`` gives, since Fabric's module gives none) and ``convert_tensors_to_scalars``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.utilities.apply_func import (
    new_apply_to_collection as apply_to_collection,
)
from trainmesh.utilities.apply_func import (
    new_convert_to_tensors as convert_to_tensors,
)
from trainmesh.utilities.collections import move_data_to_device

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["apply_to_collection", "convert_tensors_to_scalars", "convert_to_tensors", "move_data_to_device"]


def convert_tensors_to_scalars(data: Any) -> Any:
    """``data`` with each single-element tensor replaced by its ``item()`` (Fabric's); a tensor of more
    elements is a ValueError."""
    from torch import Tensor

    def to_item(value: Tensor) -> int | float | bool:
        if value.numel() != 1:
            raise ValueError(
                f"The metric `{value}` does not contain a single element, thus it cannot be converted to a scalar."
            )
        return value.item()

    return apply_to_collection(data, Tensor, to_item)
