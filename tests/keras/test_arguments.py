"""The bridge back from ``ddp_spawn``/``ddp_fork`` workers (arguments.py): what a worker sends back is
adopted by the launching process's model, also where that model was never built before ``fit``."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

keras = pytest.importorskip("keras")


def test_a_model_the_workers_built_is_built_and_trained_in_the_launching_process():
    """And the generators go on from where rank 0's fit left them. keras-io's callbacks guide builds ``Sequential([Dense(1)])`` (no Input) and fits it: the workers'
    fit builds it, the launching process's copy stays unbuilt. Its variables are taken from the result
    after building the model as the workers' fit did (Keras' build config); before: ``zip() argument 2 is
    longer than argument 1`` once training was over (measured with ddp_spawn)."""
    from trainmesh.keras.arguments import adopt_fit, fit_result

    def model():
        keras.utils.set_random_seed(0)
        built = keras.Sequential([keras.layers.Dense(1)])
        built.compile(optimizer=keras.optimizers.RMSprop(0.1), loss="mse")
        return built

    x, y = np.random.default_rng(0).random((8, 5)).astype("float32"), np.zeros((8, 1), "float32")
    worker, parent = model(), model()
    before = torch.get_rng_state()
    history = worker.fit(x, y, batch_size=4, epochs=1, verbose=0)  # shuffled: draws from torch's generator
    result, after = fit_result(worker, history), torch.get_rng_state()
    torch.set_rng_state(before)  # the launching process's generator, where the spawn left it
    assert not parent.built
    adopted = adopt_fit(parent, result)
    # where one process's fit leaves it (before: where it was, so a second fit shuffled otherwise)
    assert torch.equal(torch.get_rng_state(), after) and not torch.equal(before, after)
    assert adopted.history == history.history
    for mine, theirs in zip(parent.get_weights(), worker.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert [v.numpy().tolist() for v in parent.optimizer.variables] == [
        v.numpy().tolist() for v in worker.optimizer.variables
    ]
