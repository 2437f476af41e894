"""An optimizer with a step of its own is refused where the strategy gives each process's copy of the
optimizer only a share of whole parameters (zero1): its step may read or change the whole model (SAM
perturbs every weight before training again), and would see one share a process, silently."""

import pytest
import torch

from trainmesh.precision import Precision
from trainmesh.runtime_optimizer import RuntimeOptimizer, refuse_own_step_on_shards
from trainmesh.strategies.ddp import DDPStrategy, ZeRO1Strategy
from trainmesh.strategies.fsdp import _MEMORY_MODELS


class SharpnessAware(torch.optim.SGD):
    """A step of its own that runs its closure twice (sharpness-aware minimisation's shape)."""

    def step(self, closure):
        closure()
        return super().step(closure)


def optimizers():
    weights = [torch.nn.Parameter(torch.ones(2))]
    return SharpnessAware(weights, lr=0.1), torch.optim.Adam(weights, lr=0.1)


def test_zero1_refuses_an_optimizer_with_a_step_of_its_own_before_training():
    own, adam = optimizers()
    memory = ZeRO1Strategy.stated_capabilities.memory_model
    with pytest.raises(ValueError, match=r"strategy='zero1' cannot shard SharpnessAware's state.*strategy='ddp'"):
        refuse_own_step_on_shards([adam, own], memory, "zero1")
    with pytest.raises(ValueError, match="SharpnessAware"):  # wrapped by the Runtime as the loop holds it
        refuse_own_step_on_shards([RuntimeOptimizer.of(own, Precision("32-true", device_type="cpu"))], memory, "zero1")
    refuse_own_step_on_shards([adam], memory, "zero1")  # torch's own step: per parameter


def test_strategies_that_keep_the_optimizer_whole_or_shard_every_parameter_take_it():
    own, _ = optimizers()
    refuse_own_step_on_shards([own], DDPStrategy.stated_capabilities.memory_model, "ddp")
    for name, memory in _MEMORY_MODELS.items():  # fsdp, sharded, hsdp: a shard of every parameter
        refuse_own_step_on_shards([own], memory, name)
