"""SkipInit beside Lightning's ``_EmptyInit`` (lightning.fabric.utilities.init)."""

from __future__ import annotations

import pytest
import torch

from trainmesh.utilities.empty_init import SkipInit

lightning_init = pytest.importorskip("lightning.fabric.utilities.init")


def _built(context) -> tuple[torch.Tensor, float]:
    torch.manual_seed(3)
    with context:
        layer = torch.nn.Linear(3, 2)
    return layer.weight.detach().clone(), torch.rand(1).item()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_initialisation_and_its_random_draws_are_skipped_as_lightning_s(enabled):
    ours_weight, ours_next = _built(SkipInit(enabled=enabled))
    theirs_weight, theirs_next = _built(lightning_init._EmptyInit(enabled=enabled))
    assert ours_next == theirs_next
    if not enabled:  # an enabled block leaves the memory as torch.empty made it
        assert torch.equal(ours_weight, theirs_weight)
