"""trainmesh.keras in one process: tk.fit is Keras' own model.fit (bit-identical weights and History),
and what a run refuses, it refuses before any process starts."""

import functools
import os
import pickle
import tempfile
import textwrap
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
import trainmesh.keras as tk  # noqa: E402
from helpers.fork_checks import FORKS, results  # noqa: E402
from helpers.processes import run_code_forked  # noqa: E402


def data(n=96, features=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    return x, (x[:, 0] + x[:, 1] > 0).astype("int64") + (x[:, 2] > 1).astype("int64")


def model_with(optimizer=None, outputs=1, **compile_kwargs):
    """A small classifier (two heads when outputs=2), built and compiled after the same seed."""
    # Keras' option for a loop of models: no gc.collect, which scans torch's whole heap (0.17 CPU-s a call)
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Dense(16, activation="relu")(inputs))
    heads = [keras.layers.Dense(3, name=f"head{i}")(hidden) for i in range(outputs)]
    model = keras.Model(inputs, heads if outputs > 1 else heads[0])
    loss = [keras.losses.SparseCategoricalCrossentropy(from_logits=True) for _ in range(outputs)]
    loss = loss if outputs > 1 else loss[0]
    compile_kwargs.setdefault("metrics", ["accuracy"] if outputs == 1 else None)
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss=loss, **compile_kwargs)
    return model


def schedule():
    return keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=3, decay_rate=0.5)


x, y = data()
CASES = {  # name: (model builder, fit arguments)
    "sgd": (lambda: model_with(keras.optimizers.SGD(0.1)), {}),
    "sgd_momentum": (lambda: model_with(keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)), {}),
    "adam": (lambda: model_with(keras.optimizers.Adam(1e-2)), {}),
    "adamw": (lambda: model_with(keras.optimizers.AdamW(1e-2, weight_decay=0.1)), {}),
    "rmsprop": (lambda: model_with(keras.optimizers.RMSprop(1e-2)), {}),
    "schedule": (lambda: model_with(keras.optimizers.Adam(schedule())), {}),
    "validation_split": (model_with, {"validation_split": 0.25}),
    "class_weight": (model_with, {"class_weight": {0: 1.0, 1: 3.0, 2: 0.5}}),
    "sample_weight": (model_with, {"sample_weight": np.linspace(0.1, 2.0, len(x)).astype("float32")}),
    "loss_weights": (lambda: model_with(outputs=2, loss_weights=[1.0, 0.3]), {"y": [y, (y + 1) % 3]}),
    "weighted_metrics": (
        lambda: model_with(weighted_metrics=["accuracy"]),
        {"sample_weight": np.linspace(0.1, 2.0, len(x)).astype("float32"), "validation_split": 0.25},
    ),
    "validation_data_list": (model_with, {"validation_data": [x[:20], y[:20]], "validation_freq": 2}),
    "steps_per_epoch": (model_with, {"steps_per_epoch": 3}),  # half of the 6 batches: 2 epochs per pass
    "validation_steps": (model_with, {"validation_split": 0.25, "validation_steps": 1, "validation_batch_size": 8}),
    "shuffle_batch": (model_with, {"shuffle": "batch"}),  # shuffled within batches (once taken as True)
}


def run(fit, case):
    """A fresh model of ``case`` trained by ``fit`` (Keras' bound method or tk.fit); its History and weights."""
    build, arguments = CASES[case]
    arguments = {"y": y, **arguments}
    model = build()
    keras.utils.set_random_seed(1)  # the shuffling's seed, the same for both runs
    # 2 epochs: a second epoch (its reshuffle, steps_per_epoch's second half, validation_freq=2) is all
    # that a third and a fourth would repeat
    history = fit(model)(x, batch_size=16, epochs=2, verbose=0, **arguments)
    return history.history, [np.array(v.numpy()) for v in model.variables], model


@pytest.mark.parametrize("case", sorted(CASES))
def test_tk_fit_is_keras_model_fit(case):
    """Same seed, same arguments: tk.fit and Keras' model.fit give bit-identical weights (every
    variable, optimizer-free) and History (its params: the steps per epoch included)."""
    expected_history, expected, keras_model = run(lambda model: model.fit, case)
    history, got, model = run(lambda model: lambda *a, **k: tk.fit(model, *a, **k), case)
    assert history == expected_history
    assert model.history.params == keras_model.history.params
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_mixed_precision_policy_runs_as_keras_runs_it_on_the_cpu(policy):
    """Keras' own precision, as Keras runs it: mixed_float16 on the CPU is float16 with Keras'
    LossScaleOptimizer (Lightning's Trainer switches "16-mixed" to bfloat16 there; Keras does not),
    bit-identical to model.fit."""

    def fit(run):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
        history = run(model)(x, y, batch_size=16, epochs=2, verbose=0)
        return history.history, model.get_weights(), type(model.optimizer).__name__

    keras.mixed_precision.set_global_policy(policy)
    try:
        expected = fit(lambda model: model.fit)
        got = fit(lambda model: functools.partial(tk.fit, model))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert got[0] == expected[0] and got[2] == expected[2]
    assert expected[2] == ("LossScaleOptimizer" if policy == "mixed_float16" else "Adam")
    for a, b in zip(got[1], expected[1]):
        np.testing.assert_array_equal(a, b)


def test_two_fits_continue_like_one_with_the_summed_epochs():
    """The optimizer (its state, its iterations) carries over from one tk.fit to the next, as in Keras."""
    keras_model = model_with(keras.optimizers.Adam(1e-2))
    keras.utils.set_random_seed(1)
    once = keras_model.fit(x, y, batch_size=16, epochs=4, verbose=0)
    model = model_with(keras.optimizers.Adam(1e-2))
    keras.utils.set_random_seed(1)
    first = tk.fit(model, x, y, batch_size=16, epochs=2, verbose=0)
    second = tk.fit(model, x, y, batch_size=16, epochs=4, initial_epoch=2, verbose=0)
    assert first.history["loss"] + second.history["loss"] == once.history["loss"]
    assert int(model.optimizer.iterations.numpy()) == int(keras_model.optimizer.iterations.numpy()) == 4 * 6
    for a, b in zip(model.variables, keras_model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_distribute_routes_the_model_s_own_calls_through_trainmesh(monkeypatch):
    """Within `with tk.distribute(...)`, model.fit/evaluate/predict are tk.fit/evaluate/predict with the
    block's strategy (a refusal tk.fit makes, made from model.fit; on one process Keras' own results);
    after the block they are Keras' own again."""
    from trainmesh.runtime import Runtime

    expected_history, expected, keras_model = run(lambda model: model.fit, "validation_split")
    with tk.distribute(devices=1):
        history, got, model = run(lambda model: model.fit, "validation_split")
        assert model.evaluate(x, y, verbose=0) == keras_model.evaluate(x, y, verbose=0)
        np.testing.assert_array_equal(model.predict(x, verbose=0), keras_model.predict(x, verbose=0))
        with pytest.raises(TypeError, match="model.fit.* would refuse .*seed.*keras.utils.set_random_seed"):
            model.fit(x, y, seed=0)
        with pytest.raises(RuntimeError, match="do not nest"), tk.distribute(devices=1):
            pass
    assert history == expected_history
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    with tk.distribute(strategy="fsdp", devices=2), pytest.raises(ValueError, match="strategy='fsdp' cannot run"):
        model_with().fit(x, y, verbose=0)
    assert "fit" not in vars(keras.Model) and "evaluate" not in vars(keras.Model) and "predict" not in vars(keras.Model)
    with pytest.raises(TypeError, match="unexpected keyword argument 'seed'"):  # Keras' own fit again
        model.fit(x, y, seed=0, verbose=0)


def test_evaluate_and_predict_are_keras_own():
    model = model_with(keras.optimizers.Adam(1e-2))
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert tk.evaluate(model, x, y, batch_size=32, verbose=0, return_dict=True) == model.evaluate(
        x, y, batch_size=32, verbose=0, return_dict=True
    )
    np.testing.assert_array_equal(tk.predict(model, x, batch_size=10, verbose=0), model.predict(x, verbose=0))


def test_any_data_keras_reads_passes_as_is_on_one_process():
    """A keras.utils.PyDataset (not splittable by sample) is Keras' business on one process."""

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 6

        def __getitem__(self, index):
            return x[index * 16 : (index + 1) * 16], y[index * 16 : (index + 1) * 16]

    history = tk.fit(model_with(), Batches(), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


REFUSED = [
    ({"strategy": "fsdp", "devices": 2}, ValueError, "strategy='fsdp' cannot run Keras' model.fit: FSDP shards"),
    ({"strategy": "sharded", "devices": 2}, ValueError, "strategy='sharded' cannot run .*FSDP.*Use strategy='ddp'"),
    ({"seed": 0}, TypeError, "model.fit.* would refuse .*seed.*keras.utils.set_random_seed"),
    ({"epochz": 2}, TypeError, "model.fit.* would refuse these arguments"),
    (  # 95 samples left to train: process 0 holds 48 (2 batches of 47), process 1 holds 47 (1 batch)
        {"strategy": "ddp", "devices": 2, "batch_size": 47, "validation_split": 0.01},
        ValueError,
        "95 training samples over 2 processes .* process 0 2 batches but process 1 1.*Drop 1 samples",
    ),
    ({"strategy": "ddp", "devices": 2, "steps_per_epoch": 2, "batch_size": 20}, ValueError, "steps_per_epoch=2"),
]


@pytest.mark.parametrize(("arguments", "error", "message"), REFUSED)
def test_refused_before_any_process_starts(arguments, error, message, monkeypatch):
    """Each refusal names what, why and what to do, in the calling process (no worker is started:
    a ddp launch from pytest would re-run pytest itself, so a launch fails the test)."""
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(error, match=message):
        tk.fit(model_with(), x, y, verbose=0, **arguments)


def test_zero1_refuses_optimizers_it_cannot_split_by_variable(monkeypatch):
    """global_clipnorm (a norm over every gradient), use_ema, a LossScaleOptimizer (its state is not
    one slot per variable), an optimizer built on other variables: refused before launch, with what
    to use instead."""
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    for optimizer, message in (
        (keras.optimizers.SGD(0.1, global_clipnorm=1.0), "global_clipnorm"),
        (keras.optimizers.Adam(use_ema=True), "use_ema"),
        (keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "not made of one slot per model variable"),
    ):
        with pytest.raises(ValueError, match=f"strategy='zero1' cannot train with .*{message}.*Use strategy='ddp'"):
            tk.fit(model_with(optimizer), x, y, batch_size=16, verbose=0, strategy="zero1", devices=2)
    model = model_with(keras.optimizers.Adam())
    model.optimizer.build(model.trainable_weights)
    model.layers[1].trainable = False  # the optimizer was built on variables that are no longer all trainable
    with pytest.raises(ValueError, match="zero1.*optimizer was built on other variables.*Compile the model again"):
        tk.fit(model, x, y, batch_size=16, verbose=0, strategy="zero1", devices=2)


def orbax_checkpoint():
    """A keras.callbacks.OrbaxCheckpoint without running its __init__ (which needs the orbax-checkpoint
    package): what trainmesh does with it depends on its class only."""
    orbax = getattr(keras.callbacks, "OrbaxCheckpoint", None)
    if orbax is None:
        pytest.skip("this Keras has no OrbaxCheckpoint")
    return orbax.__new__(orbax)


def test_writing_callbacks_run_on_rank_0_only(tmp_path):
    """Rank 1 drops every callback that only writes (the progress bar included), keeps the others in
    their order, and turns BackupAndRestore into a restore that writes nothing."""
    from trainmesh.keras.callbacks import for_rank

    writers = [
        keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
        orbax_checkpoint(),
        keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        keras.callbacks.TensorBoard(str(tmp_path / "tb")),
        keras.callbacks.RemoteMonitor(),
        keras.callbacks.ProgbarLogger(),
    ]
    deciders = [keras.callbacks.EarlyStopping(), keras.callbacks.LambdaCallback(), keras.callbacks.SwapEMAWeights()]
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    given = [*writers[:3], deciders[0], *writers[3:], deciders[1], backup, deciders[2]]
    assert for_rank(given, 0) == given
    kept = for_rank(given, 1)
    assert kept[:2] + kept[3:] == [deciders[0], deciders[1], deciders[2]]
    assert type(kept[2]).__name__ == "RestoreOnly" and not isinstance(kept[2], keras.callbacks.BackupAndRestore)


def test_zero1_refuses_an_orbax_checkpoint(monkeypatch):
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(ValueError, match="strategy='zero1' cannot run OrbaxCheckpoint: .*background.*ModelCheckpoint"):
        tk.fit(
            model_with(), x, y, batch_size=16, verbose=0, strategy="zero1", devices=2, callbacks=[orbax_checkpoint()]
        )


def test_unsplittable_data_and_sum_losses_are_refused_under_several_processes(monkeypatch):
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    generator = ((x[i : i + 16], y[i : i + 16]) for i in range(0, 96, 16))
    with pytest.raises(TypeError, match="x of type generator cannot be split over 2 processes.*a generator yields"):
        tk.fit(model_with(), generator, strategy="ddp", devices=2)
    with pytest.raises(ValueError, match="x is a PyDataset without a length.*Give it __len__"):
        tk.fit(model_with(), keras.utils.PyDataset(), strategy="ddp", devices=2)

    class Three(keras.utils.PyDataset):
        def __len__(self):
            return 3

    with pytest.raises(ValueError, match="x has 3 batches, not a multiple of the 2 processes.*drop 1"):
        tk.fit(model_with(), Three(), strategy="ddp", devices=2)
    one_batch = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x)), batch_size=96)
    with pytest.raises(ValueError, match="x has 1 batches, fewer than the 2 processes.*one would have none"):
        tk.predict(model_with(), one_batch, strategy="ddp", devices=2)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(x, y))

    stream = torch.utils.data.DataLoader(Stream(), batch_size=4)
    with pytest.raises(TypeError, match="x is a DataLoader over an IterableDataset.*Use a map-style Dataset"):
        tk.fit(model_with(), stream, strategy="ddp", devices=2)
    model = model_with()
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum"))
    with pytest.raises(ValueError, match="reduction='sum'.*Use reduction='sum_over_batch_size'"):
        tk.fit(model, x, y, batch_size=16, strategy="ddp", devices=2)
    with pytest.raises(ValueError, match="not compiled"):
        tk.fit(keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)]), x, y)
    with pytest.raises(TypeError, match="takes a Keras model"):
        tk.fit(object(), x, y)


def test_a_keras_whose_internals_moved_is_refused_before_training(monkeypatch):
    """A Keras whose fit no longer calls _get_metrics_result_or_logs (kept, unused: nothing would fail,
    the metrics would stay per process), or that lost Layer._flatten_layers: refused before any
    process starts, naming what is gone, the installed version and the tested one."""
    from keras.src.backend.torch.trainer import TorchTrainer
    from keras.src.layers.layer import Layer

    from trainmesh.keras import internals
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    assert internals.missing() == []
    keras_fit = TorchTrainer.fit

    def fit_without_the_call(self, *args, **kwargs):  # a later Keras' fit, say
        return keras_fit(self, *args, **kwargs)

    model = model_with()
    monkeypatch.setattr(TorchTrainer, "fit", fit_without_the_call)
    internals.check.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"TorchTrainer.fit no longer uses _get_metrics_result_or_logs.*"):
            tk.fit(model, x, y, verbose=0)
        monkeypatch.delattr(Layer, "_flatten_layers")
        with pytest.raises(RuntimeError, match=rf"Layer._flatten_layers .*Keras {keras.__version__}.*keras==3.15.1"):
            tk.evaluate(model, x, y, verbose=0)
    finally:
        internals.check.cache_clear()


# Each check below needs a process that has not imported Keras yet (it reads KERAS_BACKEND at import):
# one interpreter imports trainmesh and torch (not Keras), then runs each check in a fork of itself
# (helpers/fork_checks.py) instead of a new interpreter per check (2 CPU-s or more of imports each).
# torch too: ``import trainmesh`` imports neither (its names load on first use), and each fork's
# ``import trainmesh.keras`` imported torch again (1.2 of its 1.5 CPU-s).
# That interpreter is a fork of the fork server (helpers/forked.py: torch, trainmesh and what a first
# Trainer reads imported, Keras not), where it can fork: a new one cost 2 CPU-s more importing torch.
PROGRAM = FORKS + textwrap.dedent("""
    import torch  # (what every check's trainmesh.keras imports: once, before the forks)
    import trainmesh

    def check(mode):
        if mode == "without_keras":  # keras as uninstalled (as when it never was: import keras fails)
            imported = ["keras" in sys.modules]  # with trainmesh
            import trainmesh.keras as tk

            imported.append("keras" in sys.modules)
            sys.modules["keras"] = None
            try:
                tk.fit(None)
            except ImportError as e:
                return imported, str(e)
            return imported, None
        os.environ["KERAS_BACKEND"] = mode
        import trainmesh.keras as tk

        try:
            tk.fit(None)
        except (ImportError, RuntimeError) as e:
            return f"{type(e).__name__} {e}"

    in_forks(check, sys.argv[1:])
""")
WRONG_BACKENDS = ("tensorflow", "jax", "numpy")


@functools.cache
def _checked() -> dict:
    """What each check of PROGRAM returned, by mode: one interpreter for the tests below."""
    modes = [*WRONG_BACKENDS, "without_keras"]
    with tempfile.TemporaryDirectory() as folder:
        done = run_code_forked(PROGRAM, modes, timeout=300, cwd=Path(folder))
    assert done.returncode == 0, done.stderr
    found = results(done.stdout)
    assert len(found) == len(modes), (done.stdout, done.stderr)
    return dict(zip(modes, found))


def test_wrong_backend_is_refused():
    for backend in WRONG_BACKENDS:
        said = _checked()[backend]
        assert "KERAS_BACKEND=torch" in said and "before" in said, (backend, said)


def test_keras_not_installed_is_refused():
    _, said = _checked()["without_keras"]
    assert 'pip install "trainmesh[keras]"' in said, said


def test_import_trainmesh_does_not_import_keras():
    imported, _ = _checked()["without_keras"]
    assert imported == [False, False]


def test_a_one_process_ddp_run_leaves_no_process_group_behind():
    """tk.fit/evaluate/predict with strategy="ddp" on one process run in this process: its gloo group
    is left afterwards (it once stayed, and a later run of another world size in the process failed)."""
    import torch.distributed as dist

    model = model_with(keras.optimizers.SGD(1e-2))
    tk.fit(model, x, y, strategy="ddp", devices=1, verbose=0)
    assert not dist.is_initialized()
    tk.evaluate(model, x, y, strategy="ddp", devices=1, verbose=0)
    tk.predict(model, x, strategy="ddp", devices=1, verbose=0)
    assert not dist.is_initialized()


class Doubling(keras.layers.Layer):
    """A layer class of this test module's own (not registered with Keras)."""

    def call(self, inputs):
        return inputs * 2.0


def test_a_model_of_this_module_s_own_class_travels_as_ddp_spawn_sends_it():
    """What the ddp_spawn launcher pickles for its workers: Keras' own pickling of a model with a class of
    this module cannot be read back (Keras finds classes by registered name only: every spawned worker
    failed so); the model as trainmesh.keras sends it (beside it, the classes its config names, by
    reference) is rebuilt with that class, its weights and predictions equal."""
    from trainmesh.keras.travel import Travelling

    model = keras.Sequential([keras.Input((8,)), Doubling(), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(TypeError, match="Could not locate class 'Doubling'"):
        pickle.loads(pickle.dumps(model))
    arrived = pickle.loads(pickle.dumps(Travelling(model))).model
    assert type(arrived.layers[0]) is Doubling
    np.testing.assert_array_equal(arrived.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_model_whose_optimizer_is_not_built_yet_travels_without_keras_skipping_warning():
    """A compiled model not trained yet (its optimizer unbuilt), as every ddp_spawn program sends it: Keras'
    own fit warns nothing, and neither does the model's travel (before: Keras' unpickling warned 'Skipping
    variable loading for optimizer 'sgd', because it has 4 variables whereas the saved optimizer has 2
    variables' at each of the launching process's rebuild checks and in every worker: three times a call,
    found running keras-io programs under ddp_spawn). The arrived model trains as the sender does."""
    import warnings

    from trainmesh.keras.travel import Travelling

    def compiled() -> keras.Model:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
        return model

    inputs, targets = x[:32], np.ones((32, 3), dtype="float32")
    sender, own = compiled(), compiled()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        own.fit(inputs, targets, batch_size=16, epochs=1, verbose=0, shuffle=False)
        arrived = pickle.loads(pickle.dumps(Travelling(sender))).model
    assert not [w for w in seen if "Skipping variable loading" in str(w.message)], [str(w.message) for w in seen]
    arrived.fit(inputs, targets, batch_size=16, epochs=1, verbose=0, shuffle=False)
    for mine, theirs in zip(arrived.variables, own.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_ddp_spawn_refuses_a_class_no_worker_can_import(monkeypatch):
    """A layer class defined inside a function cannot reach a spawned worker: refused before any process
    starts, naming the class, why, register_keras_serializable, and ddp_fork/ddp, which need no pickling
    (keras-io's siamese network's loss closure ``loss(margin)`` is refused the same way)."""

    class Local(keras.layers.Layer):
        def call(self, inputs):
            return inputs

    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda *a, **k: pytest.fail("a process was started"))
    model = keras.Sequential([keras.Input((8,)), Local(), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(
        ValueError, match="'Local' .*inside a function.*register_keras_serializable.*'ddp_fork' or 'ddp'"
    ) as refused:
        tk.fit(model, x, y, batch_size=16, verbose=0, strategy="ddp_spawn", devices=2)
    # said once, without the advice for a class lacking get_config (before: wrapped in "Keras cannot save it
    # (...). Give each class of your own whose __init__ takes arguments a get_config()", which fixes nothing)
    assert str(refused.value).count("ddp_spawn sends") == 1, str(refused.value)
    assert "get_config" not in str(refused.value)


class Endpoint(keras.layers.Layer):
    """keras-io's LogisticEndpoint's way: an ``__init__`` taking ``name`` only, so Keras cannot rebuild it
    from its config (which holds ``trainable`` and ``dtype`` too)."""

    def __init__(self, name=None):
        super().__init__(name=name)

    def call(self, inputs):
        return inputs


def test_ddp_spawn_refuses_a_model_keras_cannot_rebuild(monkeypatch):
    """Refused before any process starts, with Keras' reason and what to do (before: every spawned worker
    failed rebuilding it, after the start, with Keras' TypeError alone)."""
    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda *a, **k: pytest.fail("a process was started"))
    model = keras.Sequential([keras.Input((8,)), Endpoint(), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(
        ValueError, match="(?s)rebuilding it fails .*unexpected keyword argument.*get_config.*'ddp'"
    ) as refused:
        tk.fit(model, x, y, batch_size=16, verbose=0, strategy="ddp_spawn", devices=2)
    # Keras' reason alone (before: wrapped in the launcher's "Travelling cannot be pickled (...). Make it picklable
    # (e.g. build it in setup())", the Trainer's advice)
    assert str(refused.value).startswith("ddp_spawn sends the Keras model") and "setup()" not in str(refused.value)


class NoConfigNet(keras.Model):
    """keras-io's RecommenderNet's way: a model class taking ``__init__`` arguments, with no ``get_config``."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units)

    def call(self, inputs):
        return self.dense(inputs)


def test_ddp_spawn_refuses_a_model_keras_cannot_save_in_its_own_words(monkeypatch):
    """Keras' NotImplementedError ("must override get_config()") while the model is pickled: refused before any
    process starts as trainmesh's reason (before: inside the launcher's "Travelling.model._tracker.config cannot
    be pickled (...). Make it picklable (e.g. build it in setup())", the Trainer's advice)."""
    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda *a, **k: pytest.fail("a process was started"))
    model = NoConfigNet(3)
    model(x[:2])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="(?s)Keras cannot save it .NotImplementedError.*get_config.*'ddp'") as refused:
        tk.fit(model, x, y, batch_size=16, verbose=0, strategy="ddp_spawn", devices=2)
    assert str(refused.value).startswith("ddp_spawn sends the Keras model") and "setup()" not in str(refused.value)
    assert "Example:" not in str(refused.value)  # Keras' code sample left out
