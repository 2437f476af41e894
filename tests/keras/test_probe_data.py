"""trainmesh.keras.probe_data: the first samples the probes before start read."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is first imported

import numpy as np
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
