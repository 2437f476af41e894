"""A sharded run whose optimizer holds no state (SGD without momentum) resumes from its own
distributed checkpoint (``strategies/checkpoint.py::load_sharded_state_dict``). With no tensor in
the saved optimizer state, it was taken for a full (one-file) state, and torch's full-state load
stopped with "AssertionError: Expected device to be set" (found resuming
``FSDPStrategy(state_dict_type="sharded")`` with SGD on two processes)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainmesh.strategies import checkpoint as checkpoints


def _sharded_sgd(momentum: float):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)


def _step(model, optimizer):
    model(torch.randn(6, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_sharded_checkpoint_of_sgd_resumes_with_its_weights_and_state(one_process_group, momentum):
    model, optimizer = _sharded_sgd(momentum)
    _step(model, optimizer)
    # a copy, as a checkpoint read back from disk is (the sharded state holds the live tensors)
    saved = copy.deepcopy(checkpoints.sharded_state_dict(model, [optimizer], sharded=True))
    assert not saved["optim"][0]["state"] if momentum == 0.0 else saved["optim"][0]["state"]
    resumed, resumed_optimizer = _sharded_sgd(momentum)
    checkpoints.load_sharded_state_dict(resumed, [resumed_optimizer], saved, strict=True)
    for mine, theirs in zip(resumed.parameters(), model.parameters()):
        assert torch.equal(mine.full_tensor(), theirs.full_tensor())
    torch.manual_seed(1)
    _step(model, optimizer)
    torch.manual_seed(1)
    _step(resumed, resumed_optimizer)  # momentum buffers, where there are some, carried over
    for mine, theirs in zip(resumed.parameters(), model.parameters()):
        assert torch.equal(mine.full_tensor(), theirs.full_tensor())
