"""``extract_batch_size`` as Lightning 2.6's (``lightning.pytorch.utilities.data``), on the batches of
its own ``tests_pytorch/utilities/test_data.py::test_extract_batch_size``: a dataclass batch is
searched field by field (trainmesh raised "We could not infer the batch_size"), the same sizes and
the same ambiguity warnings otherwise."""

import warnings
from dataclasses import dataclass

import pytest
import torch

from trainmesh.utilities.data import extract_batch_size as ours

theirs = pytest.importorskip("lightning.pytorch.utilities.data").extract_batch_size


@dataclass
class _Pair:
    a: torch.Tensor
    b: torch.Tensor


BATCHES = [
    torch.zeros(11, 10, 9, 8),
    {"test": torch.zeros(11, 10)},
    [torch.zeros(11, 10)],
    _Pair(torch.zeros(11, 10), torch.zeros(11, 10)),
    {"test": [{"test": [torch.zeros(11, 10)]}]},
    {"a": [torch.tensor(1), torch.tensor(2)], "b": torch.tensor([1, 2, 3, 4])},
    _Pair(torch.zeros(11, 10), torch.zeros(1)),
    [{"test": torch.zeros(10, 10), "test_1": torch.zeros(11, 10)}],
    (["words"] * 3, _Pair(torch.zeros(5, 2), torch.zeros(5))),
]


def _answer(extract, batch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            size = extract(batch)
        except Exception as error:  # noqa: BLE001 - the class name is compared
            size = type(error).__name__
    return size, ["infer the `batch_size`" in str(w.message) for w in caught]


@pytest.mark.parametrize("index", range(len(BATCHES)))
def test_the_batch_size_is_lightning_s(index):
    batch = BATCHES[index]
    assert _answer(ours, batch) == _answer(theirs, batch)
    assert _answer(theirs, batch)[0] in (1, 5, 10, 11)
