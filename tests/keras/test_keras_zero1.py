"""trainmesh.keras under strategy="zero1" at 2 gloo processes, against ddp in the same launch.

keras_zero1_run.py fits the class_weight classifier (SGD, momentum 0.9) and the guide's convnet
without BatchNormalization/Dropout (Adam), and the classifier under AdamW with a schedule, fitted
twice, under ddp, then zero1, in the same 2 processes (the Keras programs' launch, conftest.py). zero1 applies the same Keras optimizer
arithmetic to the same averaged gradients, only split by variable, so the weights and the gathered optimizer state must be bit-identical to ddp's.
The same launch fits keras-io's GAN (a train_step applying its own d_optimizer and g_optimizer) under
ddp (a ``with tk.distribute(...)`` block) and zero1 (tk.fit), compared with one process at the global batch.
"""

import importlib.util
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)
LEGS = ("classifier", "plain_adam", "classifier_adamw")
STEPS = {"classifier": 2 * 4, "plain_adam": 2 * 4, "classifier_adamw": 3 * 4}  # epochs x (128 samples at 2 x 16)


@pytest.fixture(scope="module")
def launched(keras_ddp_programs) -> Path:
    """keras_zero1_run.py's run (a leg of the Keras programs' one launch: conftest.py)."""
    return keras_ddp_programs("keras_zero1_run")


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


def gan_record(root: Path, leg: str, strategy: str, rank: int) -> dict:
    return torch.load(root / f"{leg}_{strategy}.rank{rank}", weights_only=False)


@pytest.mark.parametrize("strategy", ["ddp", "zero1"])
def test_a_train_step_applying_its_own_optimizers_trains_one_gan(launched, strategy):
    """keras-io's GAN: compile(d_optimizer=Adam, g_optimizer=Adam, loss_fn=...), a train_step applying
    self.d_optimizer then self.g_optimizer. Its latent vectors and label noise are drawn as the guide
    draws them (keras.random with a SeedGenerator), once for the data set, and fed with it, so that each
    sample keeps its draws whichever process trains it. 2 processes at 16 (ddp in a distribute block;
    zero1, which shards model.optimizer only and averages the other two): every weight and both
    optimizers' states within 1e-5 of one process at 32, History too, the ranks bit-identical.
    (Before: each process trained its own GAN, the ranks' weights 4.6e-3 apart.)"""
    import keras_custom_steps
    from keras_run import variables

    zero, one = gan_record(launched, "gan", strategy, 0), gan_record(launched, "gan", strategy, 1)
    model, x = keras_custom_steps.gan(fed=True)
    history = model.fit(x, batch_size=2 * keras_custom_steps.BATCH, epochs=2, shuffle=False, verbose=0)
    expected = variables(model)
    assert zero["variables"].keys() == one["variables"].keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(zero["variables"][name], one["variables"][name], err_msg=name)
        np.testing.assert_allclose(zero["variables"][name], value, rtol=0, atol=1e-5, err_msg=name)
    for which in ("d_optimizer", "g_optimizer"):
        state = [np.array(v.numpy()) for v in getattr(model, which).variables]
        assert len(zero[which]) == len(one[which]) == len(state) > 2
        for got, other, value in zip(zero[which], one[which], state):
            np.testing.assert_array_equal(got, other)
            np.testing.assert_allclose(got, value, rtol=0, atol=1e-5)
    assert zero["history"] == one["history"]
    for name, values in history.history.items():
        assert zero["history"][name] == pytest.approx(values, rel=1e-5), name


def test_the_guide_s_gan_drawing_in_its_train_step_trains_one_process_s_gan(launched):
    """The guide's train_step as published, drawing its latent vectors and label noise from its
    SeedGenerator every step: each process keeps its rows of what one process draws at the global batch
    (draws.py), so ddp and zero1 at 2 x 16 are within 1e-5 of Keras' own fit at 32, the ranks
    bit-identical, zero1 equal to ddp. (Before draws.py each process drew the first rows of one process's
    draw for its half: no one-process run was equal; before that, the ranks' weights 2.4e-3 apart.)"""
    import keras_custom_steps
    from keras_run import variables

    model, x = keras_custom_steps.gan(fed=False)
    history = model.fit(x, batch_size=2 * keras_custom_steps.BATCH, epochs=2, shuffle=False, verbose=0)
    expected = variables(model)
    ddp = gan_record(launched, "gan_drawn", "ddp", 0)
    for strategy in ("ddp", "zero1"):
        for rank in (0, 1):
            got = gan_record(launched, "gan_drawn", strategy, rank)
            for name, value in ddp["variables"].items():
                np.testing.assert_array_equal(got["variables"][name], value, err_msg=name)
            assert got["history"] == ddp["history"]
    for name, value in expected.items():
        np.testing.assert_allclose(ddp["variables"][name], value, rtol=0, atol=1e-5, err_msg=name)
    for name, values in history.history.items():
        assert ddp["history"][name] == pytest.approx(values, rel=1e-5), name


def test_a_saver_only_rank_0_passes_gathers_on_every_process(launched):
    """``callbacks=[ModelCheckpoint(save_freq=2)] if rank == 0 else []`` under zero1: every process takes
    part in the gathers rank 0's saver needs (before: rank 0 gathered alone and the launch hung), the
    file is written, and training is the one the same leg trains without a saver."""
    ranks = [torch.load(launched / f"rank0_saver.rank{r}", weights_only=False) for r in (0, 1)]
    assert (launched / "rank0_saver.keras").is_file()
    plain = record(launched, "classifier", "zero1", 0)
    for found in ranks:
        assert all(np.array_equal(a, b) for a, b in zip(found["variables"], plain["variables"]))
        assert found["history"] == plain["history"]
