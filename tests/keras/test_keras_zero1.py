"""trainmesh.keras under strategy="zero1" at 2 gloo processes, against ddp in the same launch.

keras_zero1_run.py fits the class_weight classifier (SGD, momentum 0.9) and the guide's convnet
without BatchNormalization/Dropout (Adam), and the classifier under AdamW with a schedule, fitted
twice, under ddp, then zero1, in the same 2 processes. zero1 applies the same Keras optimizer
arithmetic to the same averaged gradients, only split by variable, so the weights and the gathered optimizer state must be bit-identical to ddp's.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from helpers.processes import run_program  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)
LEGS = ("classifier", "plain_adam", "classifier_adamw")
STEPS = {"classifier": 2 * 4, "plain_adam": 2 * 4, "classifier_adamw": 3 * 4}  # epochs x (128 samples at 2 x 16)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("keras_zero1")
    result: subprocess.CompletedProcess = run_program(
        [str(HERE / "keras_zero1_run.py"), str(root)], timeout=400, env={"KERAS_BACKEND": "torch"}, cwd=HERE
    )
    assert result.returncode == 0, f"keras_zero1_run.py failed:\n{result.stderr[-4000:]}"
    return root


def record(root: Path, leg: str, strategy: str, rank: int) -> dict:
    return torch.load(root / f"{leg}_{strategy}.rank{rank}", weights_only=False)


@pytest.mark.parametrize("leg", LEGS)
def test_zero1_trains_bit_identical_to_ddp(launched, leg):
    """Every model variable, the whole optimizer state after fit (gathered on every rank), the
    optimizer's iterations and History: equal to ddp's on both ranks (AdamW's weight decay and the
    schedule's learning rate act as in one process; a second fit continues the first)."""
    for rank in (0, 1):
        ddp, zero = record(launched, leg, "ddp", rank), record(launched, leg, "zero1", rank)
        assert zero["variables"].keys() == ddp["variables"].keys()
        for name, value in ddp["variables"].items():
            np.testing.assert_array_equal(zero["variables"][name], value, err_msg=name)
        assert len(zero["optimizer"]) == len(ddp["optimizer"])
        for got, expected in zip(zero["optimizer"], ddp["optimizer"]):
            np.testing.assert_array_equal(got, expected)
        assert zero["iterations"] == ddp["iterations"] == STEPS[leg]
        assert zero["history"] == ddp["history"]


@pytest.mark.parametrize("leg", LEGS)
def test_each_rank_holds_its_part_of_the_optimizer_state_during_fit(launched, leg):
    """During fit each rank's optimizer holds the slots of its variables only (the two parts, less
    the step count and learning rate each holds, make the whole state, each about half of it); after
    fit the whole state, as under ddp."""
    ddp = record(launched, leg, "ddp", 0)
    count, elements = ddp["after"]
    # On every rank: the step count, and the learning rate unless it is a schedule.
    shared_count = shared_elements = 1 if leg == "classifier_adamw" else 2
    parts = [record(launched, leg, "zero1", rank) for rank in (0, 1)]
    for part in parts:
        assert len(set(part["during"])) == 1
        assert part["after"] == (count, elements)
    during = [part["during"][0] for part in parts]
    assert sum(c - shared_count for c, _ in during) == count - shared_count
    assert sum(e - shared_elements for _, e in during) == elements - shared_elements
    for _, part_elements in during:
        assert 0.3 < (part_elements - shared_elements) / (elements - shared_elements) < 0.7


def test_model_saved_after_zero1_loads_in_plain_keras(launched):
    """rank 0's model.save after a zero1 fit: plain Keras loads it with the whole optimizer state
    (equal to what ddp trained) and predicts what the trained model predicted."""
    import keras

    loaded = keras.saving.load_model(launched / "zero1.keras")
    np.testing.assert_array_equal(
        loaded.predict(np.load(launched / "held_out.npy"), verbose=0), np.load(launched / "held_out_pred.npy")
    )
    ddp = record(launched, "plain_adam", "ddp", 0)
    assert len(loaded.optimizer.variables) == len(ddp["optimizer"])
    for got, expected in zip(loaded.optimizer.variables, ddp["optimizer"]):
        np.testing.assert_array_equal(np.array(got.numpy()), expected)
