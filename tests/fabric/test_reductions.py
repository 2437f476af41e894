"""Fabric.all_reduce's in-place results beside Lightning Fabric's ``_sync_ddp``, on a one-process gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from trainmesh.fabric.reductions import reduced_in_group

lightning_distributed = pytest.importorskip("lightning.fabric.utilities.distributed")


@pytest.fixture
def group(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group exists already")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.mark.parametrize(("values", "op"), [([3, 4], "mean"), ([1.5, 2.0], "sum"), ([7], "max")])
def test_the_caller_s_tensor_holds_the_result_as_in_lightning_fabric(group, values, op):
    ours, theirs = torch.tensor(values), torch.tensor(values)
    returned = reduced_in_group(ours, group=group, op=op)
    lightning_distributed._sync_ddp(theirs, group=group, reduce_op=op)
    assert returned is ours
    assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
