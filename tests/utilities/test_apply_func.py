"""pytorch-lightning 1.9.5's ``utilities.apply_func`` names (2.0 removed the module; lightning-bolts'
callbacks import it): each answers as the function 1.9.5's forwards to, lightning_utilities' /
Lightning Fabric's, in the same environment, and warns with today's name."""

from collections import OrderedDict, defaultdict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from trainmesh.utilities import apply_func
from trainmesh.utilities.refusal import LightningOneName

owner = pytest.importorskip("lightning_utilities.core.apply_func")
fabric = pytest.importorskip("lightning.fabric.utilities.apply_func")

Pair = namedtuple("Pair", "a b")


@dataclass
class Box:
    x: torch.Tensor
    n: int


def _batch():
    return {
        "t": torch.ones(2),
        "list": [torch.zeros(1), "s", (torch.ones(1), None)],
        "pair": Pair(torch.ones(1), 3),
        "ordered": OrderedDict(u=torch.ones(1)),
        "default": defaultdict(list, {"v": torch.ones(1)}),
        "box": Box(torch.ones(3), 2),
        "array": np.ones(2),
    }


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Box):
        return type(b) is Box and _same(a.x, b.x) and a.n == b.n
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"wrong_dtype": torch.Tensor}, {"include_none": False}],
    ids=["plain", "wrong_dtype", "without_none"],
)
def test_apply_to_collection_answers_as_lightning_utilities(kwargs):
    def double(t):
        return t * 2

    with pytest.warns(LightningOneName, match="lightning_utilities"):
        ours = apply_func.apply_to_collection(_batch(), torch.Tensor, double, **kwargs)
    assert _same(owner.apply_to_collection(_batch(), torch.Tensor, double, **kwargs), ours)
    with pytest.warns(LightningOneName):
        nones = apply_func.apply_to_collection([1, 2, "a"], int, lambda n: None if n == 1 else n, include_none=False)
    assert nones == owner.apply_to_collection([1, 2, "a"], int, lambda n: None if n == 1 else n, include_none=False)


def test_the_other_names_answer_as_fabric_s():
    data = {"a": [torch.ones(2), 3, 1.5, True], "b": np.arange(3)}
    with pytest.warns(LightningOneName):
        assert _same(apply_func.convert_to_tensors(data, "cpu"), fabric.convert_to_tensors(data, "cpu"))
        pairs = apply_func.apply_to_collections([1, {"k": 2}], [10, {"k": 20}], int, lambda a, b: a + b)
        assert pairs == owner.apply_to_collections([1, {"k": 2}], [10, {"k": 20}], int, lambda a, b: a + b)
        assert _same(apply_func.move_data_to_device(_batch(), "cpu"), fabric.move_data_to_device(_batch(), "cpu"))
        assert _same(apply_func.from_numpy(np.ones(2), "cpu"), torch.from_numpy(np.ones(2)))
        assert _same(apply_func.to_dtype_tensor([1.5]), torch.tensor([1.5]))
    assert isinstance(torch.ones(1), apply_func.TransferableDataType)
    assert not isinstance({}, apply_func.TransferableDataType)


def test_the_new_names_are_today_s_functions_without_a_warning():
    import warnings

    def double(t):
        return t * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error", LightningOneName)
        ours = apply_func.new_apply_to_collection(_batch(), torch.Tensor, double, include_none=False)
        pairs = apply_func.new_apply_to_collections([1, 2], [3, 4], int, lambda a, b: a * b)
        tensors = apply_func.new_convert_to_tensors({"n": 2}, "cpu")
        assert isinstance(torch.ones(1), apply_func.NewTransferableDataType)
    assert _same(owner.apply_to_collection(_batch(), torch.Tensor, double, include_none=False), ours)
    assert pairs == owner.apply_to_collections([1, 2], [3, 4], int, lambda a, b: a * b)
    assert _same(tensors, fabric.convert_to_tensors({"n": 2}, "cpu"))
    assert _same(apply_func.new_move_data_to_device(_batch(), "cpu"), fabric.move_data_to_device(_batch(), "cpu"))
