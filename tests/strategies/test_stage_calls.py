"""A pipeline's hook on its module's calls (strategies/stage_calls.py): only a pipeline's module
pays for it, and it lives on the module's class, not under a string key in its instance dict."""

import pickle

import pytest
import torch
from torch import nn

import trainmesh as tm
from trainmesh.strategies.stage_calls import OUTSIDE_PIPELINE, inside_schedule, refuse_direct_calls, replaying


class Net(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def test_a_model_outside_a_pipeline_calls_torch_s_own_call():
    model = Net()
    assert "__call__" not in vars(tm.Module), "every forward of every model would pay for the pipeline's hook"
    assert type(model).__call__ is nn.Module.__call__
    pickle.loads(pickle.dumps(model))  # its class is still the user's own


def test_a_stage_refuses_direct_calls_keeps_its_name_and_runs_inside_its_schedule():
    model, x = Net(), torch.ones(3, 4)
    refuse_direct_calls(model)
    assert type(model).__name__ == "Net" and isinstance(model, Net)
    with pytest.raises(RuntimeError, match="one stage of a pipeline"):
        model(x)
    with inside_schedule([model]):
        assert model(x).shape == (3, 2)
    with pytest.raises(RuntimeError, match="one stage of a pipeline"):
        model(x)
    with replaying(model, "output", x, "training_step"):
        assert model(x) == "output"
    with pytest.raises(RuntimeError) as refused:
        model(x)  # the refusal is back after the replay
    assert str(refused.value) == OUTSIDE_PIPELINE
    assert not any(key.startswith("_call") for key in vars(model))
