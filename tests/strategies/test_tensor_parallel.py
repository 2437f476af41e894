"""Tensor parallelism trained for real (strategies/tensor_parallel.py under ModelParallelStrategy):
tp=2 with and without loss_parallel, and clipping, each against one process (model_parallel_legs.py)."""

import pytest
from model_parallel_legs import assert_matches


@pytest.fixture
def legs(model_parallel_legs):
    """The legs shared with the other model-parallel test files (conftest.py): each runs once."""
    return model_parallel_legs


@pytest.mark.parametrize("layout", ["tp", "tp_lossp"])
def test_tensor_parallel_matches_one_process(legs, layout):
    # tp_lossp: the head's logits stay vocabulary-sharded and cross-entropy runs under loss_parallel.
    assert_matches(legs(layout), legs("single"))


def test_tensor_parallel_clips_like_one_process(legs):
    assert_matches(legs("tp", clip=0.05), legs("single", clip=0.05))
