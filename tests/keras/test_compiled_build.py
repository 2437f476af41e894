"""The compiled metrics and loss a ddp_spawn worker's model arrives with (compiled_build.py, through
travel.Travelling), emulated in one process: the model pickled as ddp_spawn sends it, and read back."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

keras = pytest.importorskip("keras")


@pytest.mark.parametrize("before", ["evaluate", "fit", "spawned_fit"])
def test_compiled_metrics_the_launching_process_built_arrive_built(before):
    """ddp_spawn pickles the model as Keras' .keras file, which keeps its compiled metrics and loss unbuilt:
    after a Keras evaluate (or fit) of the launching process's own, each worker's fit built them by iterating
    a batch of its data, drawing a DataLoader seed from torch's generator one process does not draw, so
    its shuffles and Dropout masks were others (2 processes of 16 against Keras' own fit at 32: weights
    1.9e-2 apart after evaluate, 2.5e-2 after fit; ddp_fork: 1.5e-8). The model as trainmesh.keras sends it
    arrives with them built from the specs of the data's first samples, drawing nothing: fitted from the
    same generators, bit-identical to the launching process's own fit, generators left alike."""
    import pickle

    from trainmesh.keras.arguments import adopt_fit, fit_result, random_states, set_random_states
    from trainmesh.keras.travel import Travelling

    def model():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((5,))
        hidden = keras.layers.Dropout(0.3)(keras.layers.Dense(8, activation="relu")(inputs))
        built = keras.Model(inputs, keras.layers.Dense(1)(hidden))
        built.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
        return built

    x = np.random.default_rng(0).random((32, 5)).astype("float32")
    y = x[:, :1].copy()
    parent = model()
    if before == "spawned_fit":  # a worker's fit adopted (a second ddp_spawn fit was 1.6e-2 apart before)
        worker = pickle.loads(pickle.dumps(Travelling(parent, (x, y, None)))).model
        worker.set_weights(parent.get_weights())
        adopt_fit(parent, fit_result(worker, worker.fit(x, y, batch_size=16, verbose=0)), (x, y, None))
    else:
        getattr(parent, before)(x, y, batch_size=16, verbose=0)
    sent, states = pickle.dumps(Travelling(parent, (x, y, None))), random_states()
    arrived = pickle.loads(sent).model
    assert random_states()["torch"].equal(states["torch"]), "arriving draws nothing"
    assert arrived._compile_metrics.built and arrived._compile_loss.built
    arrived.set_weights(parent.get_weights())  # as the worker's fit assigns the launching process's values
    runs = []
    for fitted in (parent, arrived):
        set_random_states(states)
        history = fitted.fit(x, y, batch_size=8, epochs=2, verbose=0).history
        runs.append((history, fitted.get_weights(), torch.get_rng_state()))
    assert runs[0][0] == runs[1][0]
    for mine, theirs in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert torch.equal(runs[0][2], runs[1][2])


def test_a_built_model_whose_data_gives_no_first_samples_is_refused_before_spawning():
    """Where the first samples cannot be taken without iterating the data, ddp_spawn is refused while
    pickling (before any process starts), saying to use ddp_fork or ddp."""
    import pickle

    from trainmesh.keras.travel import Travelling

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    x = np.ones((4, 2), "float32")
    model.evaluate(x, x[:, :1], verbose=0)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from zip(x, x[:, :1])

    with pytest.raises(ValueError, match=r"cannot take from this DataLoader.*'ddp_fork' or 'ddp'"):
        pickle.dumps(Travelling(model, (torch.utils.data.DataLoader(Stream(), batch_size=2), None, None)))
    pickle.dumps(Travelling(model))  # predict: nothing built from data


def test_a_model_declaring_its_batch_size_is_built_from_a_batch_of_that_size():
    """A stateful SimpleRNN on ``keras.Input((8, 1), batch_size=4)`` (keras docs' stateful RNN): after
    ddp_spawn's evaluate, the launching process builds the model's compiled metrics from the data's first
    samples as Keras' evaluate builds them from its first batch; built from 2 samples it raised Keras'
    "the batch size of the input sequences must be the same as the batch size of the initial state"
    (a program Keras' own fit/evaluate runs). Now from as many as the inputs declare."""
    from trainmesh.keras.arguments import CallResult, adopt_call, random_states

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 1), batch_size=4)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.SimpleRNN(3, stateful=True)(inputs)))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    x, y = np.ones((12, 8, 1), dtype="float32"), np.ones((12, 1), dtype="float32")
    assert adopt_call(CallResult(value="evaluated", states=random_states(), metrics=[]), model, x, y) == "evaluated"
    assert model._compile_metrics.built
