"""trainmesh.keras in one process: fit/evaluate/predict, the mappings, KerasModule, the errors."""

import os
import subprocess
import sys

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
import trainmesh.keras as tmk  # noqa: E402
from trainmesh.keras.mapping import torch_loss, torch_metric  # noqa: E402
from trainmesh.keras.optimizers import torch_optimizer_factory  # noqa: E402


def digits_arrays():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x, y = (bunch.data / 16.0).astype("float32"), bunch.target.astype("int64")
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def small_model(dropout=0.0, compiled=True):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.BatchNormalization()]
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    model = keras.Sequential([*layers, keras.layers.Dense(10)])
    if compiled:
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    return model


def test_fit_evaluate_predict_on_digits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (x, y), (x_test, y_test) = digits_arrays()
    model = small_model(dropout=0.1)
    history = tmk.fit(model, x, y, batch_size=32, epochs=5, validation_data=(x_test, y_test), verbose=False)
    assert history.epoch == [0, 1, 2, 3, 4]
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 5 for v in history.history.values())
    assert history.history["loss"][-1] < history.history["loss"][0]
    results = tmk.evaluate(model, x_test, y_test, batch_size=64, verbose=False)
    assert set(results) == {"loss", "accuracy"}
    assert results["accuracy"] >= 0.95, results
    assert results["accuracy"] == pytest.approx(history.history["val_accuracy"][-1], abs=1e-6)
    predictions = tmk.predict(model, x_test, batch_size=50, verbose=False)
    assert isinstance(predictions, np.ndarray) and predictions.shape == (len(x_test), 10)
    recount = float((predictions.argmax(1) == y_test).mean())
    assert recount == pytest.approx(results["accuracy"], abs=1e-6)
    assert not list(tmp_path.iterdir())  # Keras-like defaults: no logs, no checkpoints


def test_inputs_dataset_loader_and_pydataset():
    (x, y), _ = digits_arrays()
    x, y = x[:128], y[:128]

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return x[i * 32 : (i + 1) * 32], y[i * 32 : (i + 1) * 32]

    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    for data in (dataset, torch.utils.data.DataLoader(dataset, batch_size=32), Batches()):
        model = small_model()
        history = tmk.fit(model, data, epochs=1, verbose=False)
        assert len(history.history["loss"]) == 1
        assert tmk.predict(model, x[:10], verbose=False).shape == (10, 10)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("sparse_categorical_crossentropy", {"from_logits": True}),
        ("sparse_categorical_crossentropy", {"from_logits": False}),
        ("categorical_crossentropy", {"from_logits": True}),
        ("categorical_crossentropy", {"from_logits": False}),
        ("binary_crossentropy", {"from_logits": True}),
        ("binary_crossentropy", {"from_logits": False}),
        ("mse", {}),
        ("mae", {}),
    ],
)
def test_losses_match_keras(name, kwargs):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 5, generator=g)
    if name.startswith("sparse"):
        y_true, y_pred = torch.randint(0, 5, (16,), generator=g), logits
    elif name.startswith("categorical"):
        y_true, y_pred = torch.nn.functional.one_hot(torch.randint(0, 5, (16,), generator=g), 5).float(), logits
    elif name.startswith("binary"):
        y_true, y_pred = torch.randint(0, 2, (16, 5), generator=g).float(), logits
    else:
        y_true, y_pred = torch.randn(16, 5, generator=g), logits
    if not kwargs.get("from_logits", True):
        y_pred = torch.softmax(logits, -1) if not name.startswith("binary") else torch.sigmoid(logits)
    keras_loss = (
        keras.losses.get(
            {
                "class_name": {"mse": "MeanSquaredError", "mae": "MeanAbsoluteError"}.get(
                    name, "".join(p.capitalize() for p in name.split("_")).replace("Crossentropy", "Crossentropy")
                ),
                "config": kwargs,
            }
        )
        if kwargs or name in ("mse", "mae")
        else None
    )
    expected = keras_loss(y_true, y_pred)
    for spec in ([name] if not kwargs.get("from_logits") else []) + [keras_loss]:
        got = torch_loss(spec)(y_true, y_pred)
        assert abs(float(got) - float(expected)) <= 1e-6, (spec, float(got), float(expected))
    # a (N,) target against a (N, 1) output: Keras' shape rule, not broadcasting to (N, N)
    got = torch_loss("mse")(torch.arange(4.0), torch.ones(4, 1))
    assert float(got) == pytest.approx(float(keras.losses.MeanSquaredError()(torch.arange(4.0), torch.ones(4, 1))))


def test_metrics_match_keras():
    g = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(32, 4, generator=g), torch.randint(0, 4, (32,), generator=g)
    one_hot = torch.nn.functional.one_hot(labels, 4).float()
    cases = [
        ("accuracy", labels, logits, keras.metrics.SparseCategoricalAccuracy()),
        ("sparse_categorical_accuracy", labels, logits, keras.metrics.SparseCategoricalAccuracy()),
        ("categorical_accuracy", one_hot, logits, keras.metrics.CategoricalAccuracy()),
        (
            "binary_accuracy",
            (labels % 2).float()[:, None],
            torch.sigmoid(logits[:, :1]),
            keras.metrics.BinaryAccuracy(),
        ),
        ("mae", one_hot, logits, keras.metrics.MeanAbsoluteError()),
        ("mse", one_hot, logits, keras.metrics.MeanSquaredError()),
    ]
    for name, y_true, y_pred, reference in cases:
        reference.update_state(y_true, y_pred)
        logged, fn = torch_metric(name)
        assert logged == name
        assert float(fn(y_true, y_pred)) == pytest.approx(float(reference.result()), abs=1e-6), name
        assert torch_metric(reference)[0] == reference.name


def test_optimizer_mapping():
    params = [torch.nn.Parameter(torch.zeros(3))]
    adam = torch_optimizer_factory(keras.optimizers.Adam(learning_rate=1e-3))(params)
    assert type(adam) is torch.optim.Adam
    assert adam.defaults["lr"] == 1e-3 and adam.defaults["eps"] == 1e-7 and adam.defaults["betas"] == (0.9, 0.999)
    adamw = torch_optimizer_factory(keras.optimizers.AdamW(learning_rate=2e-3))(params)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.004 and adamw.defaults["lr"] == 2e-3
    sgd = torch_optimizer_factory(keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True))(params)
    assert type(sgd) is torch.optim.SGD and sgd.defaults["momentum"] == 0.9 and sgd.defaults["nesterov"] is True
    rms = torch_optimizer_factory(keras.optimizers.RMSprop(0.01))(params)
    assert type(rms) is torch.optim.RMSprop and rms.defaults["alpha"] == 0.9 and rms.defaults["eps"] == 1e-7
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(ValueError, match="schedule.*torch.optim"):
        torch_optimizer_factory(keras.optimizers.Adam(schedule))
    with pytest.raises(ValueError, match="Adagrad.*optimizer=torch.optim.Adam"):
        torch_optimizer_factory(keras.optimizers.Adagrad())
    with pytest.raises(ValueError, match="gradient_clip_val"):
        torch_optimizer_factory(keras.optimizers.Adam(global_clipnorm=1.0))
    # KerasModule: the compiled optimizer, or a torch class or factory given instead
    module = tmk.KerasModule(small_model())
    assert type(module.configure_optimizers()) is torch.optim.Adam
    assert (
        type(tmk.KerasModule(small_model(), optimizer=torch.optim.RMSprop).configure_optimizers())
        is torch.optim.RMSprop
    )
    given = tmk.KerasModule(small_model(), optimizer=lambda p: torch.optim.SGD(p, lr=0.5))
    opt = given.configure_optimizers()
    assert type(opt) is torch.optim.SGD and all(p.requires_grad for g in opt.param_groups for p in g["params"])


class _Sink:
    def __init__(self):
        self.logged = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = float(value.detach() if hasattr(value, "detach") else value)


def test_training_step_trains_and_evaluation_does_not():
    module = tmk.KerasModule(small_model(dropout=0.5))
    sink = _Sink()
    module.attach(None, sink)
    x, y = torch.rand(8, 64), torch.randint(0, 10, (8,))
    original = module.model.__call__
    with torch.no_grad():
        assert not torch.equal(module.model(x, training=True), module.model(x, training=True))  # dropout active
    # The steps pass training= themselves: dropout differs in training, never in validation.
    from unittest import mock

    with mock.patch.object(
        type(module.model), "__call__", autospec=True, side_effect=lambda self, *a, **k: original(*a, **k)
    ) as called:
        module.training_step((x, y), 0)
        module.validation_step((x, y), 0)
        module.test_step((x, y), 0)
        module.predict_step((x,), 0)
    assert [c.kwargs["training"] for c in called.call_args_list] == [True, False, False, False]
    assert set(sink.logged) == {"loss", "accuracy", "val_loss", "val_accuracy", "test_loss", "test_accuracy"}
    with torch.no_grad():
        v1, v2 = module.validation_step((x, y), 0), module.validation_step((x, y), 0)
    assert torch.equal(v1, v2)


def test_uncompiled_model_without_loss_is_refused():
    model = small_model(compiled=False)
    with pytest.raises(ValueError, match="no loss.*model.compile.*loss="):
        tmk.fit(model, np.zeros((4, 64), "float32"), np.zeros(4, "int64"), verbose=False)
    with pytest.raises(ValueError, match="no loss"):
        tmk.evaluate(model, np.zeros((4, 64), "float32"), np.zeros(4, "int64"), verbose=False)
    # predicting needs no loss, as in Keras
    assert tmk.predict(model, np.zeros((4, 64), "float32"), verbose=False).shape == (4, 10)
    # a loss given, but no optimizer anywhere
    with pytest.raises(ValueError, match="no optimizer"):
        tmk.fit(
            tmk.KerasModule(model, loss="sparse_categorical_crossentropy"),
            np.zeros((4, 64), "float32"),
            np.zeros(4, "int64"),
            verbose=False,
        )


def test_not_a_keras_model_and_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="wraps a Keras model"):
        tmk.KerasModule(torch.nn.Linear(2, 2))
    model = small_model()
    with pytest.raises(TypeError, match="not data trainmesh.keras reads"):
        tmk.fit(model, "data.csv", verbose=False)
    with pytest.raises(ValueError, match="drop y"):
        tmk.fit(model, torch.utils.data.TensorDataset(torch.zeros(2, 64)), np.zeros(2), verbose=False)
    with pytest.raises(TypeError, match="Keras callbacks"):
        tmk.fit(
            model,
            np.zeros((4, 64), "float32"),
            np.zeros(4, "int64"),
            callbacks=[keras.callbacks.History()],
            verbose=False,
        )


def test_fsdp_still_refuses_keras_models():
    with pytest.raises(ValueError, match="strategy='fsdp' cannot train .*Keras model.*Use strategy='ddp'"):
        tmk.fit(small_model(), np.zeros((4, 64), "float32"), np.zeros(4, "int64"), strategy="fsdp", verbose=False)


def _run(code, **env):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
    )


def test_wrong_backend_is_refused():
    code = (
        "import trainmesh.keras as tmk\n"
        "try:\n    tmk.KerasModule(None)\nexcept (ImportError, RuntimeError) as e:\n    print(type(e).__name__, e)\n"
    )
    for backend in ("tensorflow", "jax", "numpy"):
        result = _run(code, KERAS_BACKEND=backend)
        assert "KERAS_BACKEND=torch" in result.stdout and "before" in result.stdout, (
            backend,
            result.stdout,
            result.stderr,
        )


def test_keras_not_installed_is_refused():
    code = (
        "import sys; sys.modules['keras'] = None\n"
        "import trainmesh.keras as tmk\n"
        "try:\n    tmk.fit(None)\nexcept ImportError as e:\n    print(e)\n"
    )
    result = _run(code)
    assert "pip install 'trainmesh[keras]'" in result.stdout, (result.stdout, result.stderr)


def test_import_trainmesh_does_not_import_keras():
    result = _run(
        "import sys, trainmesh; assert 'keras' not in sys.modules; import trainmesh.keras; "
        "assert 'keras' not in sys.modules; print('ok')"
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_a_checkpointed_keras_run_resumes_exactly(tmp_path):
    # Interrupted after 2 of 3 epochs and resumed from trainmesh's last.ckpt: every Keras variable
    # (moving statistics included) and the History equal the run that never stopped. Keras names
    # layers with process-wide counters (sequential_1, _2...), which the state dict's names carry:
    # clear_session() builds each model with the names a fresh process (a real resume) gives it.
    (x, y), _ = digits_arrays()
    x, y = x[:256], y[:256]
    keras.backend.clear_session()
    whole = small_model(dropout=0.2)
    full = tmk.fit(whole, x, y, batch_size=32, epochs=3, verbose=False)
    keras.backend.clear_session()
    first = small_model(dropout=0.2)
    tmk.fit(
        first, x, y, batch_size=32, epochs=2, verbose=False, enable_checkpointing=True, default_root_dir=str(tmp_path)
    )
    last = next(tmp_path.rglob("last.ckpt"))
    keras.backend.clear_session()
    resumed_model = small_model(dropout=0.2)
    resumed = tmk.fit(resumed_model, x, y, batch_size=32, epochs=3, verbose=False, ckpt_path=str(last))
    for expected, got in zip(whole.variables, resumed_model.variables):
        assert torch.equal(torch.as_tensor(got.value), torch.as_tensor(expected.value)), expected.path
    assert resumed.history == full.history
