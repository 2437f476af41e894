"""The "-true" precisions convert floating tensors only: a complex RoPE buffer stays complex.

A one-process Trainer run of the Llama test model against a hand-written bf16 loop, and the
casting function every strategy places its module through (trainmesh.utilities.placement).
Multi-process placements: tests/strategies/test_llama_placement.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

import trainmesh as tm  # noqa: E402
from helpers.llama import IGNORE_INDEX, Llama, LlamaConfig, token_loader  # noqa: E402
from trainmesh.strategies.rebind import ParameterMoves, rebind_optimizer  # noqa: E402

CONFIG = LlamaConfig(n_layers=2)


def llama_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX)


class RecordingLlama(Llama):
    def training_step(self, batch, batch_idx):
        loss = llama_loss(self, *batch)
        self.losses = [*getattr(self, "losses", []), loss.detach().clone()]
        return loss


def fit(precision: str, steps: int) -> RecordingLlama:
    torch.manual_seed(0)
    model = RecordingLlama(CONFIG)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, token_loader(CONFIG, batch_size=4, samples=16))
    return model


@pytest.mark.parametrize(
    "precision,dtype", [("bf16-true", torch.bfloat16), ("16-true", torch.float16), ("64-true", torch.float64)]
)
def test_true_precisions_keep_the_complex_rope_buffer(precision, dtype):
    model = fit(precision, steps=1)
    assert {param.dtype for param in model.parameters()} == {dtype}
    assert model.freqs_cis.dtype == torch.complex64
    assert torch.equal(model.freqs_cis, Llama(CONFIG).freqs_cis)  # bit-equal to the fp32 run's buffer


def test_bf16_true_trains_like_a_hand_written_bf16_loop_that_keeps_the_buffer_complex():
    model = fit("bf16-true", steps=4)
    torch.manual_seed(0)
    reference = Llama(CONFIG)
    for param in reference.parameters():
        param.data = param.data.to(torch.bfloat16)  # parameters only: freqs_cis stays complex64
    optimizer = torch.optim.AdamW(reference.parameters(), lr=reference.lr)
    losses = []
    for tokens, targets in token_loader(CONFIG, batch_size=4, samples=16):
        loss = llama_loss(reference, tokens, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    assert torch.equal(torch.stack(model.losses), torch.stack(losses)), (model.losses, losses)
    for (name, trained), expected in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(trained, expected), name


class Tables(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.register_buffer("rope", torch.polar(torch.ones(3), torch.arange(3.0)))
        self.register_buffer("steps", torch.arange(3))
        self.register_buffer("mask", torch.tensor([True, False]))
        self.register_buffer("scale", torch.ones(2))


def test_place_tensors_casts_floating_tensors_only_and_keeps_parameter_objects():
    from trainmesh.utilities.placement import place_tensors

    model = Tables()
    model.shared = model.linear  # a module registered twice: converted once
    weight, rope = model.linear.weight, model.rope.clone()
    place_tensors(model, dtype=torch.bfloat16)
    assert model.linear.weight is weight and weight.dtype == torch.bfloat16
    assert model.scale.dtype == torch.bfloat16
    assert model.rope.dtype == torch.complex64 and torch.equal(model.rope, rope)
    assert model.steps.dtype == torch.int64 and model.mask.dtype == torch.bool


def test_a_placement_record_holds_no_weak_reference_and_leaves_parameters_swappable():
    model = nn.Linear(2, 2)
    moves = ParameterMoves(model)
    # torch.utils.swap_tensors (Module.to's way for DTensor parameters) refuses a tensor with a
    # weak reference: a model that applied its own parallelize_module could not be moved.
    torch.utils.swap_tensors(model.weight, nn.Parameter(torch.zeros(2, 2)))
    moves.record_placement(model)
    assert moves.replacement(model.weight) is None


def test_a_tensor_made_after_placement_is_never_taken_for_a_replaced_parameter():
    model = nn.Sequential(nn.Linear(4, 4))
    moves = ParameterMoves(model)
    old, data = model[0].weight, torch.zeros(4, 4)
    model[0].weight = nn.Parameter(torch.ones(4, 4))  # replaced, as fully_shard does
    moves.record_placement(model)
    freed = id(old)
    del old
    # CPython usually reuses the freed object's memory, so ``extra`` often gets ``old``'s id: the
    # case a record keyed by id alone gets wrong. Whether it does depends on the allocator (CI saw
    # a different id once), so try a few times for the reuse and check the outcome either way.
    extras = [nn.Parameter(data) for _ in range(8)]
    extra = next((p for p in extras if id(p) == freed), extras[0])
    optimizer = torch.optim.SGD([extra, model[0].bias], lr=0.1)
    assert rebind_optimizer(optimizer, moves) == 0
    assert optimizer.param_groups[0]["params"][0] is extra
