"""The input a command builds for a model without a Trainer: dtype from the first layer, the
data's batch, example_input_array, and one sentence when the forward cannot take it."""

import pytest
import torch
from torch import nn

from trainmesh.utilities.model_input import check_forward, model_input


def test_an_embedding_first_gets_token_ids_below_its_vocabulary():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    batch, source = model_input(model, batch_shape="3,5", data=None, model_path="m:Net")
    assert batch.dtype == torch.int64 and batch.shape == (3, 5) and 0 <= int(batch.min()) <= int(batch.max()) < 10
    assert "token ids below 10" in source


def test_other_models_get_floats_and_the_sources_come_in_order():
    model = nn.Linear(6, 2)
    batch, source = model_input(model, batch_shape="5,6", data=None, model_path="m:Net")
    assert batch.dtype == torch.float32 and source == "a random float batch of shape (5, 6)"
    model.example_input_array = torch.ones(2, 6)
    batch, source = model_input(model, batch_shape=None, data=None, model_path="m:Net")
    assert batch is model.example_input_array and source == "Linear.example_input_array"

    class Data:
        def prepare_data(self):
            pass

        def setup(self, stage):
            self.stage = stage

        def train_dataloader(self):
            return [(torch.zeros(3, 6), torch.zeros(3))]

    batch, source = model_input(model, batch_shape=None, data=Data(), model_path="m:Net")
    assert batch[0].shape == (3, 6) and source == "one training batch of Data"  # the data wins over the example
    batch, source = model_input(model, batch_shape="4,6", data=Data(), model_path="m:Net")
    assert batch.shape == (4, 6)  # and --batch_shape over both


def test_a_forward_that_fails_is_one_sentence():
    with pytest.raises(
        ValueError,
        match=r"m:Net's forward failed on here \(dtype torch.float32, shape \(4, 7\)\): "
        r"RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    ):
        check_forward(nn.Linear(6, 2), torch.zeros(4, 7), source="here", model_path="m:Net")
    with pytest.raises(ValueError, match="starts with a dict, not a tensor"):
        check_forward(nn.Linear(6, 2), ({"x": 1},), source="here", model_path="m:Net")
