"""``ExactFlopCounterMode``: torch's ``FlopCounterMode`` counts, every result bit for bit a run's without it."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from trainmesh.utilities.exact_flop_counter import ExactFlopCounterMode


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    # SiLU's and Mish's backward, batch norm and nearest upsampling: ops torch's counter decomposes
    return torch.nn.Sequential(
        torch.nn.Conv1d(3, 8, 3),
        torch.nn.BatchNorm1d(8),
        torch.nn.SiLU(),
        torch.nn.Upsample(scale_factor=2),
        torch.nn.Mish(),
        torch.nn.Dropout(0.2),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 28, 2),
    )


def _step(net: torch.nn.Module, counter: FlopCounterMode | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    x = torch.randn(4, 3, 16, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)  # the dropout's draws
    if counter is None:
        net(x).pow(2).mean().backward()
    else:
        with counter:
            net(x).pow(2).mean().backward()
    results = [p.grad.clone() for p in net.parameters()] + [b.clone() for b in net.buffers()]
    return results, torch.get_rng_state()


def test_counts_are_torch_s_and_every_result_is_a_run_s_without_a_counter() -> None:
    plain, plain_rng = _step(_net(), None)
    theirs = FlopCounterMode(display=False)
    their_results, _ = _step(_net(), theirs)
    ours = ExactFlopCounterMode(display=False)
    our_results, our_rng = _step(_net(), ours)

    assert ours.get_total_flops() == theirs.get_total_flops() > 0
    assert all(torch.equal(a, b) for a, b in zip(plain, our_results, strict=True))
    assert torch.equal(plain_rng, our_rng), "counting drew random numbers"
    # what the counter is for: torch's own changes results of this step
    assert not all(torch.equal(a, b) for a, b in zip(plain, their_results, strict=True))
