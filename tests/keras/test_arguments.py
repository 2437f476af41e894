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


def test_a_loader_s_generator_goes_on_from_where_rank_0_s_fit_left_it():
    """A DataLoader(shuffle=True, generator=g) travels to ddp_spawn's workers pickled; their fit moves their
    copies of g (each epoch's permutation, each iterator's seed). Before, the launching process's g stayed where
    it was, so a second fit drew the first fit's orders again: a user's loader fitted twice under ddp_spawn at
    2 x 16 was 6.4e-2 (weights) / 9.2e-2 (History) from Keras' own two fits at 32, silently. Now the workers send
    g's state back and the launching process's g takes it, as one process's fit leaves it."""
    import pickle

    from trainmesh.keras.arguments import adopt_fit, data_generators, fit_result

    def loader():
        generator = torch.Generator()
        generator.manual_seed(7)
        data = torch.utils.data.TensorDataset(torch.rand(24, 5), torch.zeros(24, 1))
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=generator)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    parent = loader()
    worker = pickle.loads(pickle.dumps(parent))  # the copy a spawned worker unpickles
    history = model.fit(worker, epochs=2, verbose=0)
    initial = parent.generator.get_state()
    assert data_generators(parent) == [parent.generator]  # the loader's and its sampler's: one object
    adopt_fit(model, fit_result(model, history, data_generators(worker)), generators=data_generators(parent))
    assert torch.equal(parent.generator.get_state(), worker.generator.get_state())
    assert not torch.equal(parent.generator.get_state(), initial)


def test_a_loader_s_generator_goes_on_from_where_rank_0_s_evaluate_or_predict_left_it():
    """As after fit (above): a ddp_spawn worker's evaluate or predict on a DataLoader(shuffle=True, generator=g)
    moves its copy of g (the permutation, the iterator's seed). Before, the launching process's g stayed where
    it was, so the next evaluate (or fit) read the same order again, where Keras' own had moved g on."""
    import pickle
    from types import SimpleNamespace

    from trainmesh.keras.arguments import adopt_call, call_result, data_generators

    generator = torch.Generator()
    generator.manual_seed(7)
    data = torch.utils.data.TensorDataset(torch.rand(24, 5), torch.zeros(24, 1))
    parent = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=generator)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    runtime = SimpleNamespace(process=SimpleNamespace(reports_to_parent=True))
    for call in (model.evaluate, model.predict):
        initial = parent.generator.get_state()
        worker = pickle.loads(pickle.dumps(parent))  # the copy a spawned worker unpickles
        result = call_result(runtime, call(worker, verbose=0), None, data_generators(worker))
        adopt_call(pickle.loads(pickle.dumps(result)), generators=data_generators(parent))
        assert torch.equal(parent.generator.get_state(), worker.generator.get_state())
        assert not torch.equal(parent.generator.get_state(), initial)


def test_a_model_not_built_yet_arrives_with_the_launching_process_s_initializer_seeds():
    """ddp_spawn's workers rebuild the model from its config, and Keras draws each unseeded initializer's
    seed from Python's generator when the layer is made: a model only ``fit`` builds (no ``Input``) was
    built in the workers with other seeds than the launching process's, so it trained from other initial
    weights than Keras' own fit (2 processes of 16 against one of 32: History 0.51 apart, weights 1.23).
    The model as trainmesh.keras sends it, fitted by Keras' own fit, trains bit-identically to the model
    the launching process holds."""
    import pickle
    import random

    from trainmesh.keras.travel import Travelling

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    sent = pickle.dumps(Travelling(model))
    random.seed(1)  # a spawned worker's generator is not the launching process's
    arrived = pickle.loads(sent).model
    assert not arrived.built
    x, y = np.random.default_rng(0).random((16, 5)).astype("float32"), np.ones((16, 1), "float32")
    histories = []
    for fitted in (model, arrived):
        torch.manual_seed(0)
        histories.append(fitted.fit(x, y, batch_size=8, epochs=2, verbose=0).history)
    assert histories[0] == histories[1]
    for mine, theirs in zip(model.get_weights(), arrived.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_an_evaluation_s_workers_leave_the_launching_process_as_keras_evaluate_leaves_it():
    """A ddp_spawn/ddp_fork worker's evaluate sends back, besides its value, the generators where it left
    them and its metrics' states: the launching process takes them and builds its compiled metrics as
    Keras' own evaluate does (from the data's specs, drawing nothing). Before, its torch generator had not
    moved (Keras' evaluate draws a DataLoader seed) and its metrics were unbuilt, so a later fit shuffled,
    dropped out and built otherwise: 2 processes of 16 trained 6.8e-2 apart from Keras' own evaluate then
    fit at 32 (9.3e-2 after predict, which sends the generators back too)."""
    from types import SimpleNamespace

    from trainmesh.keras.arguments import adopt_call, call_result, random_states, set_random_states

    def model():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((5,))
        hidden = keras.layers.Dropout(0.3)(keras.layers.Dense(8, activation="relu")(inputs))
        built = keras.Model(inputs, keras.layers.Dense(1)(hidden))
        built.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
        return built

    x = np.random.default_rng(0).random((32, 5)).astype("float32")
    y = x[:, :1].copy()
    worker, parent = model(), model()
    before = random_states()
    value = worker.evaluate(x, y, batch_size=16, verbose=0)
    after, left = torch.get_rng_state(), random_states()
    result = call_result(SimpleNamespace(process=SimpleNamespace(reports_to_parent=True)), value, worker)
    set_random_states(before)  # the launching process, where the workers left it
    assert not parent._compile_metrics.built
    assert adopt_call(result, parent, x, y) == value
    assert torch.equal(torch.get_rng_state(), after) and parent._compile_metrics.built
    for mine, theirs in zip(parent.metrics_variables, worker.metrics_variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    histories = []
    for fitted in (worker, parent):  # each from where the evaluation left the generators
        set_random_states(left)
        histories.append(fitted.fit(x, y, batch_size=8, epochs=1, verbose=0).history)
    assert histories[0] == histories[1]
    for mine, theirs in zip(parent.get_weights(), worker.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


class Patches(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(keras.ops.reshape(x, (-1, 8)))


def test_a_rebuilt_subclassed_model_s_result_pickles():
    """A subclassed model built by calling it before fit (keras-io's masked image modeling), as ddp_spawn's
    workers rebuild it from its config, keeps its build config's shape in Keras' TrackedList (its tracker holds
    a lambda): every worker trained, then failed sending its result back (AttributeError: Can't pickle local
    object 'Layer._initialize_tracker.<locals>.<lambda>'). The result is plain now, and adopted."""
    import pickle

    from trainmesh.keras.arguments import adopt_fit, fit_result
    from trainmesh.keras.travel import Travelling

    keras.utils.set_random_seed(0)
    model = Patches()
    x = np.random.default_rng(0).random((8, 2, 4)).astype("float32")
    model(x[:2])
    model.compile(optimizer="sgd", loss="mse")
    arrived = pickle.loads(pickle.dumps(Travelling(model))).model
    history = arrived.fit(x, x[:, 0, :1], batch_size=4, verbose=0)
    result = pickle.loads(pickle.dumps(fit_result(arrived, history)))
    adopt_fit(model, result)
    for mine, theirs in zip(model.get_weights(), arrived.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_ddp_fit_says_no_lightning_banner_as_keras_says_none(monkeypatch):
    """Keras' own fit prints no "Initializing distributed: GLOBAL_RANK..." / "All distributed processes
    registered" lines; trainmesh.keras' ddp run formed its group through the strategy that says Lightning's
    (strategies/process_group.py), so every Keras program on several processes printed Lightning's banner.
    One process, in-process: a ddp fit of one device forms a group of one as a run of 2 does."""
    import logging

    import trainmesh.keras as tk
    from trainmesh.launchers.environments import find_free_port

    monkeypatch.setenv("MASTER_PORT", str(find_free_port()))
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("trainmesh")
    logger.addHandler(handler)
    x, y = np.random.default_rng(0).random((8, 3)).astype("float32"), np.zeros((8, 1), "float32")

    def fit(ours):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return tk.fit(model, x, y, strategy="ddp", devices=1, verbose=0) if ours else model.fit(x, y, verbose=0)

    try:
        theirs = fit(False)
        said_by_keras = list(lines)
        ours = fit(True)
    finally:
        logger.removeHandler(handler)
    assert ours.history == theirs.history  # the run is the one meant
    assert [line for line in lines if "distributed" in line] == said_by_keras == []


def _own_step_with_unreduced_loss(reduce):
    """keras-io's image captioning pattern, shrunk: ``model.loss`` keeps per-sample values (``reduction=None``)
    and the program's own ``train_step`` reduces them itself, by ``reduce``."""
    from keras import ops

    class Captioner(keras.Model):
        def train_step(self, data):
            x, y = data
            self.zero_grad()
            per_sample = self.loss(y, self(x))
            (ops.sum(per_sample) if reduce == "sum" else ops.mean(per_sample)).backward()
            with torch.no_grad():
                self.optimizer.apply([v.value.grad for v in self.trainable_weights], self.trainable_weights)
            return {}

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = Captioner(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss=keras.losses.MeanSquaredError(reduction=None))
    model(np.zeros((2, 4), "float32"))
    model.optimizer.build(model.trainable_variables)
    rows = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    return model, rows[:, :4], rows[:, 4:]


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_an_unreduced_loss_the_program_s_own_step_reduces_is_left_to_the_step_probe(reduce):
    """A ``model.loss`` with ``reduction=None`` was refused before start whatever the step did with it, advising
    'sum_over_batch_size', which breaks such a program in Keras' own fit (scout-k2: keras-io image captioning; its
    per-sample-mean variant, right under several processes, refused too). Where the program's own step reduces the
    loss, the step probe decides, as for any own step: the sum refused, the mean trains. A compiled loss Keras'
    own step reduces is still refused by its reduction."""
    from trainmesh.keras.arguments import check_loss_reduction
    from trainmesh.keras.step_probe import refusal

    model, x, y = _own_step_with_unreduced_loss(reduce)
    check_loss_reduction(model)  # before: ValueError "MeanSquaredError(reduction=None)"
    reason = refusal(model, x, y, None, None, world=2)
    if reduce == "sum":
        assert reason is not None and "the loss is a sum over the batch's samples" in reason, reason
    else:
        assert reason is None, reason
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    plain.compile(optimizer="sgd", loss=keras.losses.MeanSquaredError(reduction=None))
    with pytest.raises(ValueError, match="reduction=None"):
        check_loss_reduction(plain)
