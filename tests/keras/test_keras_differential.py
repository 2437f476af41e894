"""trainmesh.keras against Keras itself on one process: the same program under Keras' own
``model.fit``/``evaluate``/``predict`` and under ``tk.fit``/``evaluate``/``predict`` gives bit-identical
History, weights, optimizer state, evaluation and predictions.

The programs: models with their own ``compute_loss``/``compute_metrics`` (keras_custom_steps.Penalized),
their own ``train_step``/``test_step`` (keras-io's CustomModel), a ``train_step`` applying two optimizers
of its own (keras-io's GAN), each fed as arrays, a ``keras.utils.PyDataset``, a torch DataLoader
(shuffled too) or a Python generator (with ``steps_per_epoch``/``validation_steps``/``steps``).
The 2-process runs of the same programs are compared with one process in test_keras_callbacks_ddp.py
(overrides), test_keras_ddp.py (PyDataset, DataLoader) and test_keras_zero1.py (the GAN).
"""

import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import keras_custom_steps  # noqa: E402
import keras_run  # noqa: E402

import keras  # noqa: E402
import trainmesh.keras as tk  # noqa: E402

BATCH = 32
EPOCHS = 2


def fed(kind: str, x, y, *, shuffle: bool = False):
    """x and y as ``kind`` gives them to Keras (made anew for each run: a generator is used up)."""
    if kind == "pydataset":
        return keras_run.batches("pydataset", x, y, BATCH), None
    if kind == "loader":
        dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=shuffle), None
    if kind == "generator":

        def batches():
            while True:
                for start in range(0, len(x), BATCH):
                    yield x[start : start + BATCH], y[start : start + BATCH]

        return batches(), None
    return x, y


def program(model_kind: str, data_kind: str) -> tuple:
    """The model, and the arguments of fit, evaluate and predict (x, y first) of one program."""
    if model_kind == "custom_step":  # 128 samples: 96 to train (3 batches), 32 held out
        model, x, y = keras_custom_steps.custom_step()
    else:  # 160 samples: 128 to train (4 batches), 32 held out
        model, (x, y) = keras_custom_steps.penalized(), keras_run.get_tabular()
    split = len(x) - BATCH  # the held-out batch: validation, evaluate and predict
    kind = data_kind.split("_")[0]
    train = fed(kind, x[:split], y[:split], shuffle=data_kind == "loader_shuffled")
    held = fed(kind, x[split:], y[split:])
    fit = {"x": train[0], "y": train[1], "epochs": EPOCHS, "validation_data": held[0] if held[1] is None else held}
    evaluate = {"x": fed(kind, x[split:], y[split:])[0], "y": y[split:] if kind == "arrays" else None}
    predict = {"x": x[split:] if kind == "arrays" else fed(kind, x[split:], y[split:])[0]}
    if data_kind == "arrays":
        fit.update(batch_size=BATCH, shuffle=True)
        evaluate["batch_size"] = predict["batch_size"] = BATCH
    if data_kind == "generator":
        fit.update(steps_per_epoch=split // BATCH, validation_steps=1)
        evaluate["steps"] = predict["steps"] = 1
    return model, fit, evaluate, predict


def run(fit_with: str, model_kind: str, data_kind: str) -> dict:
    """One run of the program under Keras (``fit_with="keras"``) or trainmesh.keras (``"tk"``)."""
    model, fit, evaluate, predict = program(model_kind, data_kind)
    keras.utils.set_random_seed(1)  # shuffling: the same draws in both runs
    own = fit_with == "keras"
    history = (model.fit if own else lambda **k: tk.fit(model, **k))(verbose=0, **fit)
    return {
        "history": history.history,
        "params": history.params,
        "variables": [np.array(v.numpy()) for v in model.variables],
        "optimizer": [np.array(v.numpy()) for v in model.optimizer.variables],
        "evaluate": (model.evaluate if own else lambda **k: tk.evaluate(model, **k))(
            verbose=0, return_dict=True, **evaluate
        ),
        "predict": (model.predict if own else lambda **k: tk.predict(model, **k))(verbose=0, **predict),
    }


PROGRAMS = [
    ("penalized", "arrays"),
    ("penalized", "pydataset"),
    ("penalized", "loader"),
    ("penalized", "loader_shuffled"),
    ("penalized", "generator"),
    ("custom_step", "arrays"),
    ("custom_step", "generator"),
]


@pytest.mark.parametrize(("model_kind", "data_kind"), PROGRAMS)
def test_tk_is_keras_itself_on_one_process(model_kind, data_kind):
    """History (its params too), every variable, the optimizer's state, evaluate's metrics and every
    prediction: bit-identical to Keras' own calls."""
    expected, got = run("keras", model_kind, data_kind), run("tk", model_kind, data_kind)
    assert got["history"] == expected["history"]
    assert got["params"] == expected["params"]
    assert got["evaluate"] == expected["evaluate"]
    np.testing.assert_array_equal(got["predict"], expected["predict"])
    for key in ("variables", "optimizer"):
        assert len(got[key]) == len(expected[key]) > 0
        for a, b in zip(got[key], expected[key], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_train_step_applying_two_optimizers_is_keras_itself_on_one_process():
    """keras-io's GAN as published (its train_step draws from a SeedGenerator and applies d_optimizer,
    then g_optimizer): tk.fit's History, weights and both optimizers' states bit-identical to Keras'."""
    results = []
    for fit_with in ("keras", "tk"):
        model, x = keras_custom_steps.gan(fed=False)
        arguments = {"batch_size": BATCH, "epochs": EPOCHS, "shuffle": False, "verbose": 0}
        history = model.fit(x, **arguments) if fit_with == "keras" else tk.fit(model, x, **arguments)
        states = [[np.array(v.numpy()) for v in o.variables] for o in (model.d_optimizer, model.g_optimizer)]
        results.append((history.history, [np.array(v.numpy()) for v in model.variables], states))
    (expected_history, expected, expected_states), (history, got, states) = results
    assert history == expected_history
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    for state, expected_state in zip(states, expected_states, strict=True):
        assert len(state) == len(expected_state) > 2
        for a, b in zip(state, expected_state, strict=True):
            np.testing.assert_array_equal(a, b)
