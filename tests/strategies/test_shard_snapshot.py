"""What a live fsdp replica group sends a recovering one, read in torchft's quorum thread while the
step's forward runs (``strategies/shard_snapshot.py``). Reading it through ``state_dict()`` there
resharded the units in use (FSDP2's state-dict pre-hook) and the backward failed: a clean-clone CI
run lost the surviving group of ``test_an_fsdp_group_that_loses_a_process_is_dropped_and_rejoins_shard_by_shard``
that way ("setStorage: ... out of bounds for storage of size 0")."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies.shard_snapshot import ShardSnapshot
from trainmesh.utilities.dtensors import is_dtensor


def _sharded_model():
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 1))
    for layer in (model[0], model[3]):
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer


def _train_step(model, optimizer, during_forward=None, where="inside"):
    """``during_forward`` is called inside the forward (before the last layer's) or inside the backward
    (before the last layer's), where torchft's quorum thread may call it."""
    if during_forward is not None:
        call = lambda *_: (during_forward(), None)[1]  # noqa: E731 - a hook that returns nothing
        if where == "forward":
            handle = model[3].register_forward_pre_hook(call)
        else:
            handle = model[3].register_full_backward_pre_hook(call)
    loss = model(torch.randn(6, 4)).pow(2).mean()
    if during_forward is not None:
        handle.remove()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _through_state_dict(model, optimizer):
    sharded = checkpoints.sharded_state_dict(model, [optimizer], sharded=True)
    return _locals(sharded)


def _locals(tree):
    if is_dtensor(tree):
        return tree.to_local()
    if isinstance(tree, dict):
        return {k: _locals(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_locals(v) for v in tree]
    return tree


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_at_rest_the_snapshot_is_the_sharded_state_dict(one_process_group):
    model, optimizer = _sharded_model()
    snapshot = ShardSnapshot(model, [optimizer])
    _train_step(model, optimizer)
    _train_step(model, optimizer)
    assert _equal(snapshot.read(), _through_state_dict(model, optimizer))


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_read_during_the_forward_leaves_the_step_intact(one_process_group, where):
    model, optimizer = _sharded_model()
    snapshot = ShardSnapshot(model, [optimizer])
    _train_step(model, optimizer)
    before = _through_state_dict(model, optimizer)
    read = []
    _train_step(model, optimizer, during_forward=lambda: read.append(snapshot.read()), where=where)
    assert _equal(read[0]["model"], before["model"])  # the step's start: the optimizer steps after the read
    assert set(read[0]["model"]) == {
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
        "2.running_mean",
        "2.running_var",
        "2.num_batches_tracked",
        "3.weight",
        "3.bias",
    }


@pytest.mark.parametrize(
    ("where", "error"),
    [("forward", "mixed torch.Tensor and DTensor"), ("backward", "data is not allocated")],
)
def test_through_state_dict_during_the_forward_breaks_the_step(one_process_group, where, error):
    """Why the snapshot exists (what trainmesh sent a peer before): torch's FSDP2 reshards the units in
    use when state_dict() is called, and the forward or the backward fails (in the CI run: the
    backward, "setStorage: ... storage of size 0")."""
    model, optimizer = _sharded_model()
    _train_step(model, optimizer)
    with pytest.raises(RuntimeError, match=error):
        _train_step(model, optimizer, during_forward=lambda: _through_state_dict(model, optimizer), where=where)
