"""pytorch-lightning 1.9.5's ``pytorch_lightning.utilities.apply_func`` (1.8 deprecated it, 2.0
removed it): ``apply_to_collection`` and its kin under the old module name, each warning with
today's home as 1.9.5 warns. Published 1.x code imports it at module level (lightning-bolts'
``TrainingDataMonitor`` and ``BatchGradientVerification``), so without it the program stops at
its imports.

>>> import torch
>>> from trainmesh.utilities.apply_func import apply_to_collection
>>> apply_to_collection({"x": torch.ones(1), "n": 2}, torch.Tensor, lambda t: t * 3)  # doctest: +SKIP
{'x': tensor([3.]), 'n': 2}
"""

from __future__ import annotations

import dataclasses
import warnings
from abc import ABC
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
import torch

from trainmesh.utilities.collections import move_data_to_device as _move_data_to_device
from trainmesh.utilities.refusal import LightningOneName

__all__ = [
    "NewTransferableDataType",
    "TransferableDataType",
    "apply_to_collection",
    "apply_to_collections",
    "convert_to_tensors",
    "from_numpy",
    "move_data_to_device",
    "new_apply_to_collection",
    "new_apply_to_collections",
    "new_convert_to_tensors",
    "new_move_data_to_device",
    "to_dtype_tensor",
]


def _warn(name: str, today: str) -> None:
    warnings.warn(
        f"trainmesh.utilities.apply_func.{name} is pytorch-lightning 1.x's name (1.8 deprecated it, 2.0 "
        f"removed it); today: {today}",
        LightningOneName,
        stacklevel=3,
    )


def _is_namedtuple(obj: object) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def _rebuild(mapping: Any, items: Any) -> Any:
    """A mapping of ``mapping``'s own class holding ``items``."""
    kind: Any = type(mapping)
    return kind(items)


def _apply(data: Any, dtype: Any, function: Callable[..., Any], args: tuple, kwargs: dict, how: dict) -> Any:
    """One level of Lightning's (lightning_utilities') walk: mappings, namedtuples, sequences and
    dataclass instances are rebuilt with ``function`` applied to their items of ``dtype``."""
    wrong = how["wrong_dtype"]
    if isinstance(data, dtype) and (wrong is None or not isinstance(data, wrong)):
        return function(data, *args, **kwargs)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return _apply_dataclass(data, dtype, function, args, kwargs, how)
    keep = how["include_none"]
    if isinstance(data, Mapping):
        pairs = [(k, _apply(v, dtype, function, args, kwargs, how)) for k, v in data.items()]
        items = OrderedDict((k, v) for k, v in pairs if keep or v is not None)
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, items)
        return _rebuild(data, items)
    if _is_namedtuple(data) or (isinstance(data, Sequence) and not isinstance(data, str)):
        out = [_apply(d, dtype, function, args, kwargs, how) for d in data]
        out = [v for v in out if keep or v is not None]
        return type(data)(*out) if _is_namedtuple(data) else type(data)(out)
    return data


def _apply_dataclass(data: Any, dtype: Any, function: Callable[..., Any], args: tuple, kwargs: dict, how: dict) -> Any:
    fields = {f.name: (getattr(data, f.name), f.init) for f in dataclasses.fields(data)}
    # a copy of the instance that shares the fields' values (they are replaced next)
    result = deepcopy(data, memo={id(value): value for value, _ in fields.values()})
    for name, (value, init) in fields.items():
        new = _apply(value, dtype, function, args, kwargs, how) if init else None
        if not init or (not how["include_none"] and new is None):
            new = value
        try:
            setattr(result, name, new)
        except dataclasses.FrozenInstanceError as error:
            if how["allow_frozen"]:
                break
            raise ValueError(
                "A frozen dataclass was passed to `apply_to_collection` but this is not allowed."
            ) from error
    return result


def apply_to_collection(
    data: Any,
    dtype: Any,
    function: Callable[..., Any],
    *args: Any,
    wrong_dtype: Any = None,
    include_none: bool = True,
    allow_frozen: bool = False,
    **kwargs: Any,
) -> Any:
    """``function`` applied to every item of ``dtype`` in ``data``, its collections rebuilt.

    Args:
        data: a value, or a mapping / sequence / namedtuple / dataclass of them, nested.
        dtype: the type (or tuple of types) ``function`` is applied to.
        function: called as ``function(item, *args, **kwargs)``.
        *args: passed on to ``function``.
        wrong_dtype: items also of this type are left as they are.
        include_none: keep items for which ``function`` returned None.
        allow_frozen: stop at a frozen dataclass instead of raising.
        **kwargs: passed on to ``function``.

    Examples:
        >>> apply_to_collection([1, "a", (2,)], int, lambda n: n * 10)  # doctest: +SKIP
        [10, 'a', (20,)]
    """
    _warn("apply_to_collection", "lightning_utilities.core.apply_func.apply_to_collection")
    how = {"wrong_dtype": wrong_dtype, "include_none": include_none, "allow_frozen": allow_frozen}
    return _apply(data, dtype, function, args, kwargs, how)


def _apply_pairs(
    data1: Any, data2: Any, dtype: Any, function: Callable[..., Any], args: tuple, kwargs: dict, wrong: Any
) -> Any:
    if data1 is None:
        if data2 is None:
            return None
        data1, data2 = data2, None
    if data2 is None:
        how = {"wrong_dtype": wrong, "include_none": True, "allow_frozen": False}
        return _apply(data1, dtype, function, args, kwargs, how)
    if isinstance(data1, dtype) and (wrong is None or not isinstance(data1, wrong)):
        return function(data1, data2, *args, **kwargs)
    if isinstance(data1, Mapping):
        keys = data1.keys() | data2.keys()
        return _rebuild(
            data1, {k: _apply_pairs(data1[k], data2[k], dtype, function, args, kwargs, wrong) for k in keys}
        )
    if _is_namedtuple(data1) or (isinstance(data1, Sequence) and not isinstance(data1, str)):
        if len(data1) != len(data2):
            raise ValueError("Sequence collections have different sizes.")
        out = [_apply_pairs(a, b, dtype, function, args, kwargs, wrong) for a, b in zip(data1, data2)]
        return type(data1)(*out) if _is_namedtuple(data1) else type(data1)(out)
    return _apply(
        data1, dtype, function, args, kwargs, {"wrong_dtype": wrong, "include_none": True, "allow_frozen": False}
    )


def apply_to_collections(
    data1: Any, data2: Any, dtype: Any, function: Callable[..., Any], *args: Any, wrong_dtype: Any = None, **kwargs: Any
) -> Any:
    """``function(item1, item2)`` over two collections of the same structure, zipped.

    Args:
        data1: the first collection (swapped with ``data2`` when None).
        data2: the second; None applies ``function`` to ``data1`` alone.
        dtype: the type (or tuple of types) ``function`` is applied to.
        function: called as ``function(item1, item2, *args, **kwargs)``.
        *args: passed on to ``function``.
        wrong_dtype: items also of this type are left as they are.
        **kwargs: passed on to ``function``.

    Examples:
        >>> apply_to_collections([1, 2], [3, 4], int, lambda a, b: a + b)  # doctest: +SKIP
        [4, 6]
    """
    _warn("apply_to_collections", "lightning_utilities.core.apply_func.apply_to_collections")
    return _apply_pairs(data1, data2, dtype, function, args, kwargs, wrong_dtype)


def from_numpy(value: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """``torch.from_numpy(value).to(device)``.

    Args:
        value: the array.
        device: where the tensor goes.

    Examples:
        >>> from_numpy(np.ones(2), "cpu")  # doctest: +SKIP
        tensor([1., 1.], dtype=torch.float64)
    """
    _warn("from_numpy", "torch.from_numpy().to()")
    return torch.from_numpy(value).to(device)


# bool becomes uint8 as in Lightning (NCCL has no bool)
_CONVERSIONS: tuple[tuple[type, Callable[[Any, Any], torch.Tensor]], ...] = (
    (bool, lambda v, device: torch.tensor(v, dtype=torch.uint8, device=device)),
    (int, lambda v, device: torch.tensor(v, dtype=torch.int, device=device)),
    (float, lambda v, device: torch.tensor(v, dtype=torch.float, device=device)),
    (np.ndarray, lambda v, device: torch.from_numpy(v).to(device)),
)


def convert_to_tensors(data: Any, device: torch.device | str) -> Any:
    """Python numbers and numpy arrays in ``data`` as tensors on ``device``, tensors moved there.

    Args:
        data: a collection.
        device: where the tensors go.

    Examples:
        >>> convert_to_tensors({"n": 2}, "cpu")  # doctest: +SKIP
        {'n': tensor(2, dtype=torch.int32)}
    """
    _warn("convert_to_tensors", "lightning.fabric.utilities.apply_func.convert_to_tensors")
    how = {"wrong_dtype": None, "include_none": True, "allow_frozen": False}
    for kind, convert in _CONVERSIONS:
        data = _apply(data, kind, convert, (device,), {}, how)
    return _move_data_to_device(data, device)


def move_data_to_device(batch: Any, device: torch.device | str) -> Any:
    """Every tensor (and object with ``.to``) in ``batch`` moved to ``device``.

    Args:
        batch: a collection.
        device: where it goes.

    Examples:
        >>> move_data_to_device([torch.ones(1)], "cpu")  # doctest: +SKIP
        [tensor([1.])]
    """
    _warn("move_data_to_device", "trainmesh.utilities.move_data_to_device")
    return _move_data_to_device(batch, device)


def to_dtype_tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
    """``torch.tensor(*args, **kwargs)``.

    Args:
        *args: passed to ``torch.tensor``.
        **kwargs: passed to ``torch.tensor``.

    Examples:
        >>> to_dtype_tensor(1.5)  # doctest: +SKIP
        tensor(1.5000)
    """
    _warn("to_dtype_tensor", "torch.tensor")
    return torch.tensor(*args, **kwargs)


class TransferableDataType(ABC):  # noqa: B024 (an ABC for its subclass hook, as Lightning's)
    """A type any object with a ``.to`` method is an instance of (``isinstance(x, TransferableDataType)``).

    Examples:
        >>> isinstance(torch.ones(1), TransferableDataType)  # doctest: +SKIP
        True
    """

    @classmethod
    def __subclasshook__(cls, subclass: Any) -> Any:
        if cls is TransferableDataType:
            return callable(getattr(subclass, "to", None))
        return NotImplemented

    def __init__(self) -> None:
        _warn("TransferableDataType", "an object with a .to method")


# 1.9.5's module also held today's functions under these names (it forwarded to them)
def new_apply_to_collection(*args: Any, **kwargs: Any) -> Any:
    """Today's ``apply_to_collection`` (1.9.5's module imported lightning_utilities' under this name).

    Args:
        *args: as :func:`apply_to_collection`.
        **kwargs: as :func:`apply_to_collection`.

    Examples:
        >>> new_apply_to_collection([1], int, str)  # doctest: +SKIP
        ['1']
    """
    how = {k: kwargs.pop(k, d) for k, d in (("wrong_dtype", None), ("include_none", True), ("allow_frozen", False))}
    data, dtype, function, *rest = args
    return _apply(data, dtype, function, tuple(rest), kwargs, how)


def new_apply_to_collections(*args: Any, **kwargs: Any) -> Any:
    """Today's ``apply_to_collections`` (1.9.5's module imported it under this name).

    Args:
        *args: as :func:`apply_to_collections`.
        **kwargs: as :func:`apply_to_collections`.

    Examples:
        >>> new_apply_to_collections([1], [2], int, lambda a, b: a + b)  # doctest: +SKIP
        [3]
    """
    data1, data2, dtype, function, *rest = args
    wrong = kwargs.pop("wrong_dtype", None)
    return _apply_pairs(data1, data2, dtype, function, tuple(rest), kwargs, wrong)


def new_convert_to_tensors(data: Any, device: torch.device | str) -> Any:
    """Today's ``convert_to_tensors`` (1.9.5's module imported Fabric's under this name).

    Args:
        data: a collection.
        device: where the tensors go.

    Examples:
        >>> new_convert_to_tensors([1], "cpu")  # doctest: +SKIP
        [tensor(1, dtype=torch.int32)]
    """
    how = {"wrong_dtype": None, "include_none": True, "allow_frozen": False}
    for kind, convert in _CONVERSIONS:
        data = _apply(data, kind, convert, (device,), {}, how)
    return _move_data_to_device(data, device)


new_move_data_to_device = _move_data_to_device


class NewTransferableDataType(TransferableDataType):  # noqa: B024
    """Fabric's transferable type (1.9.5's module imported it under this name): without the warning.

    Examples:
        >>> isinstance(torch.ones(1), NewTransferableDataType)  # doctest: +SKIP
        True
    """

    @classmethod
    def __subclasshook__(cls, subclass: Any) -> Any:
        if cls is NewTransferableDataType:
            return callable(getattr(subclass, "to", None))
        return NotImplemented

    def __init__(self) -> None:
        pass
