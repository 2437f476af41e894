"""The training step's own work, counted (not timed): the tensor ops the loop adds to a step."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainmesh.trainer.optimization.closure import batch_end_outputs


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _loss() -> torch.Tensor:
    weight = torch.tensor([1.5, -2.25], requires_grad=True)
    return (weight * weight).sum()


def test_on_train_batch_end_outputs_loss_is_one_op_and_lightnings_value():
    # Lightning's outputs["loss"] is (loss / accumulate_grad_batches).detach().clone(): a tensor of its
    # own. One op makes it (a division is a new tensor; at 1 a clone), not a division and a clone.
    for accumulate, expected in ((1, ["detach", "clone"]), (4, ["detach", "div"])):
        loss = _loss()
        with _Ops() as counted:
            outputs = batch_end_outputs(loss, manual=False, accumulate=accumulate)
        assert counted.ops == expected, (accumulate, counted.ops)
        lightning = (loss / accumulate).detach().clone()
        assert torch.equal(outputs["loss"], lightning) and not outputs["loss"].requires_grad
        assert outputs["loss"].untyped_storage().data_ptr() != loss.untyped_storage().data_ptr()
    # Manual optimization: the loss as returned, detached (Lightning's ManualResult)
    loss = _loss()
    assert torch.equal(batch_end_outputs({"loss": loss, "n": 3}, manual=True, accumulate=2)["loss"], loss.detach())
