import dataclasses
from collections import namedtuple

import pytest
import torch

from trainmesh.utilities.collections import apply_to_tensors, first_tensor, infer_batch_size, move_to_device

Pair = namedtuple("Pair", ["x", "y"])


@dataclasses.dataclass(frozen=True)
class Frozen:
    image: torch.Tensor
    label: int
    extra: dict


def test_nested_batches_keep_their_types_and_every_tensor_is_mapped():
    batch = {
        "pair": Pair(torch.ones(2), [torch.zeros(3), (torch.ones(1), "s")]),
        "frozen": Frozen(torch.ones(4), 7, {"mask": torch.ones(2, dtype=torch.bool)}),
    }
    doubled = apply_to_tensors(batch, lambda t: t * 2)
    assert isinstance(doubled["pair"], Pair)
    assert torch.equal(doubled["pair"].x, torch.full((2,), 2.0))
    assert isinstance(doubled["pair"].y[1], tuple) and doubled["pair"].y[1][1] == "s"
    assert isinstance(doubled["frozen"], Frozen) and doubled["frozen"].label == 7
    assert torch.equal(doubled["frozen"].image, torch.full((4,), 2.0))
    assert doubled["frozen"].extra["mask"].dtype == torch.int64  # bool * 2 promotes, proving it was mapped
    assert torch.equal(batch["frozen"].image, torch.ones(4)), "the input batch is left alone"


def test_move_to_device_and_batch_size():
    batch = (torch.ones(5, 3), {"y": torch.zeros(5)})
    moved = move_to_device(batch, torch.device("meta"))
    assert moved[0].device.type == "meta" and moved[1]["y"].device.type == "meta"
    assert infer_batch_size(batch) == 5
    assert infer_batch_size({"n": 3}) == 1


def test_first_tensor_is_found_depth_first_in_every_shape_of_batch():
    a, b = torch.ones(2), torch.zeros(3)
    assert first_tensor([a, b]) is a and first_tensor((a, b)) is a  # the fast path: (inputs, targets)
    assert first_tensor(["text", b]) is b and first_tensor([[a], b]) is a and first_tensor(([], b)) is b
    assert first_tensor(Pair("x", b)) is b and first_tensor({"k": 1, "v": (a,)}) is a
    assert first_tensor(Frozen(a, 1, {})) is a
    assert first_tensor([]) is None and first_tensor(("text", 1)) is None and first_tensor(a) is a


def test_a_defaultdict_batch_moves_as_lightning_moves_it():
    """A batch holding a ``defaultdict`` (lightning-bolts' apply_func users pass one) keeps its
    class and factory, as Lightning 2.6's ``move_data_to_device``; it used to stop with a TypeError."""
    from collections import defaultdict

    from trainmesh.utilities.collections import move_data_to_device

    lightning = pytest.importorskip("lightning.fabric.utilities.apply_func")
    batch = {"d": defaultdict(list, {"x": torch.ones(2)})}
    ours, theirs = move_data_to_device(batch, "cpu"), lightning.move_data_to_device(batch, "cpu")
    assert type(ours["d"]) is type(theirs["d"]) is defaultdict
    assert ours["d"].default_factory is theirs["d"].default_factory is list
    assert torch.equal(ours["d"]["x"], theirs["d"]["x"])
