"""trainmesh.keras.probe_data: the first samples the probes before start read."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is first imported

import numpy as np
import pytest
import torch


def test_the_first_samples_of_arrays_of_outputs_and_of_a_loader_read_without_drawing():
    """Arrays (a dict of outputs too) and a shuffled DataLoader give their first 16 samples; the loader
    is read by index, so torch's generator (its shuffle's) is where it was; 8 samples are not probed."""
    from trainmesh.keras.probe_data import probe_batch

    x = np.arange(40, dtype="float32").reshape(20, 2)
    y = {"flag": x[:, :1] > 9, "amount": x[:, 1:]}
    taken_x, taken_y = probe_batch(x, y)
    assert taken_x.shape == (16, 2) and set(taken_y) == {"flag", "amount"} and taken_y["amount"].shape == (16, 1)
    data = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(x[:, 1:]))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    state = torch.get_rng_state()
    taken_x, taken_y = probe_batch(loader, None)
    assert torch.equal(torch.get_rng_state(), state)
    np.testing.assert_array_equal(np.asarray(taken_x), x[:16])
    small = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.zeros(8, 1)))
    assert probe_batch(small, None) is None


def _inputs_only_program(reduce):
    """keras-io's siamese network (vision/siamese_network) shrunk: a PyDataset of (anchor, positive, negative)
    batches with no targets, a train_step reducing the triplet loss by ``reduce`` (keras-io's TF tape
    differentiates the unreduced vector: its sum)."""
    import keras
    from keras import ops

    class Siamese(keras.Model):
        def train_step(self, data):
            ((anchor, positive, negative),) = data
            self.zero_grad()
            a, p, n = self(anchor), self(positive), self(negative)
            loss = ops.maximum(ops.sum(ops.square(a - p), -1) - ops.sum(ops.square(a - n), -1) + 0.5, 0.0)
            (ops.sum(loss) if reduce == "sum" else ops.mean(loss)).backward()
            with torch.no_grad():
                self.optimizer.apply([v.value.grad for v in self.trainable_weights], self.trainable_weights)
            return {}

    class Triplets(keras.utils.PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            rows = np.random.default_rng(i).normal(size=(3, 16, 4)).astype("float32")
            return (tuple(rows),)

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = Siamese(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer="sgd")
    return model, Triplets()


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_py_dataset_of_inputs_alone_is_probed(reduce):
    """A PyDataset (or DataLoader) yielding ``(x,)``, no targets, was not probed: keras-io's siamese network
    with its triplet loss summed trained under 2 processes with half the gradient (k-progs7: weights 1.9e-3,
    Adam's moments 0.84 from Keras' fit at the global batch, silently). Now its first batch is probed: the sum
    refused, the mean not."""
    from trainmesh.keras.step_probe import refusal

    model, data = _inputs_only_program(reduce)
    model(np.zeros((2, 4), "float32"))
    model.optimizer.build(model.trainable_variables)
    reason = refusal(model, data, None, None, None, world=2)
    if reduce == "sum":
        assert reason is not None and "the loss is a sum over the batch's samples" in reason, reason
    else:
        assert reason is None
