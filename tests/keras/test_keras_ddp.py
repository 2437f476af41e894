"""trainmesh.keras under ddp (2 gloo processes) against the keras-io guide's own DDP loop.

The guide is seed 004_* ("Multi-GPU distributed training with PyTorch"): its get_model()
convnet with BatchNormalization and Dropout, DistributedSampler(shuffle=False), DDP, torch
Adam, CrossEntropyLoss on logits. Every leg is a real program (keras_run.py) with a hard
timeout; trainmesh's ddp re-runs that program once per rank. The fit legs of one world size
share one launch (``plan``), one after another in the same processes.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parent
SCRIPT = HERE / "keras_run.py"
sys.path.insert(0, str(HERE.parent))

from helpers.batches import Batches  # noqa: E402
from helpers.processes import run_program  # noqa: E402

# Checked without importing keras here: the legs run it on the torch backend in their own processes.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)

BATCH = 16  # per process, as the guide's batch_size with its DistributedSampler


def leg(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return run_program([str(SCRIPT), *args], timeout=timeout, env={"KERAS_BACKEND": "torch"}, cwd=HERE)


def run_leg(*args: str) -> None:
    result = leg(*args)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stderr[-4000:]}"


def load(out: Path, rank: int = 0) -> dict:
    return torch.load(f"{out}.rank{rank}")


def plan(root: Path) -> list[tuple[str, int, list[str], dict[str, str]]]:
    """(name, world size, keras_run.py arguments, environment) of every fit leg: legs of one world
    size run in one launch, one after another in the same processes (helpers/batches.py). A leg
    NAME writes root/NAME.rank{R}. The guide's loop (its own process group) and the plain-Keras
    load (a process without trainmesh) keep their own launches."""

    def fit(name, devices, batch, *options):
        return (
            name,
            devices,
            ["fit", str(root / name), *options[:1], str(devices), str(batch), *options[1:]],
            {"KERAS_BACKEND": "torch"},
        )

    return [
        fit("ddp", 2, BATCH, "guide"),
        fit("plain_ddp_sgd", 2, BATCH, "plain", "sgd"),
        fit("plain_ddp_adam", 2, BATCH, "plain", "adam"),
        fit("zero1", 2, BATCH, "guide", "adam", "zero1"),
        fit("plain_single_sgd", 1, 2 * BATCH, "plain", "sgd"),
        fit("plain_single_adam", 1, 2 * BATCH, "plain", "adam"),
    ]


class Legs(Batches):
    def out(self, name: str) -> Path:
        """The leg's output prefix, once it ran."""
        self(name)
        return self.root / name


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Legs:
    root = tmp_path_factory.mktemp("keras_legs")
    return Legs(SCRIPT, root, plan(root), leg_timeout=150, cwd=HERE)


@pytest.fixture(scope="module")
def handwritten(legs) -> Path:
    """The guide's loop at world 2. It is torch and Keras alone (mp.spawn, gloo, DDP); like the
    torch reference in tests/strategies/conftest.py it gets one retry for a hang on a loaded machine."""
    out = legs.root / "handwritten"
    errors = []
    for _ in range(2):
        try:
            result = leg("handwritten", str(out), str(BATCH))
        except subprocess.TimeoutExpired as timeout:
            errors.append(f"timed out: {timeout}")
            continue
        if result.returncode == 0:
            return out
        errors.append(result.stderr[-3000:])
    pytest.fail("the guide's hand-written loop failed twice:\n" + "\n----\n".join(errors))


@pytest.fixture(scope="module")
def trainmesh_ddp(legs) -> Path:
    """trainmesh.keras.fit(strategy="ddp", devices=2) on the guide's model; every rank saves."""
    return legs.out("ddp")


def test_ddp_fit_is_bit_identical_to_the_guides_loop(handwritten, trainmesh_ddp):
    """Rank 0's Keras variables after 2 epochs, every one of them: kernels, biases, BatchNormalization
    moving statistics and Dropout's seed state, torch.equal to the guide's loop.

    The guide's loop here is the guide's with three choices made explicit: the same seed on every
    rank before get_model() and again before the first step (what fit(seed=) does), torch Adam with
    the compiled keras.optimizers.Adam's learning rate and epsilon (1e-7; torch's default is 1e-8),
    and model(x, training=True) (the guide's model(x) runs BatchNormalization and Dropout in
    inference mode in Keras 3). Rank 0's moving statistics agree because DDP leaves each rank its own
    and trainmesh broadcasts rank 0's.
    """
    reference, ours = load(handwritten)["variables"], load(trainmesh_ddp)
    assert ours["world_size"] == 2
    assert set(ours["variables"]) == set(reference)
    assert any("moving_mean" in name for name in reference) and any("seed_generator" in name for name in reference)
    different = {
        name: (ours["variables"][name].double() - tensor.double()).abs().max().item()
        for name, tensor in reference.items()
        if not torch.equal(ours["variables"][name], tensor)
    }
    assert not different, f"rank 0 differs from the guide's loop (max abs difference per variable): {different}"
    history = ours["history"]
    assert len(history.get("loss", [])) == 2, history


def test_every_rank_holds_the_same_batchnorm_statistics(handwritten, trainmesh_ddp):
    """DDP synchronises gradients only: BatchNormalization's moving statistics (non-trainable
    variables) drift apart across ranks in the guide's loop. Under trainmesh every rank holds rank 0's."""
    ranks = [load(trainmesh_ddp, rank)["variables"] for rank in range(2)]
    moving = [name for name in ranks[0] if "moving_" in name]
    assert len(moving) == 6  # 3 BatchNormalization layers x (mean, variance)
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
    gathered = load(trainmesh_ddp)["gathered"]
    if gathered is not None:  # gathered in the leg itself when fit leaves its process group up
        for name in moving:
            assert torch.equal(gathered[0][name], gathered[1][name]), name
    # Without the broadcast they differ: the guide's own loop, rank 0 against rank 1.
    guide = [load(handwritten, rank)["variables"] for rank in range(2)]
    assert any(not torch.equal(guide[0][name], guide[1][name]) for name in moving)


@pytest.mark.parametrize(
    ("optimizer", "tolerance"),
    [("sgd", 1e-5), pytest.param("adam", 1e-4, marks=pytest.mark.slow)],
)
def test_ddp_matches_one_device_with_the_global_batch(legs, optimizer, tolerance):
    """World 2 with a batch of B per process trains the weights one device trains with 2B (the
    "identical to single-device training" promise of synchronous data parallelism, seed 002_*).

    This holds only for a model without BatchNormalization and Dropout, so the guide's convnet is
    used without them: BatchNormalization normalises each process's batch of B with that batch's
    own mean and variance, not the 2B batch's, so the activations and gradients differ (by design,
    not by rounding); and the guide's Dropout (no seed of its own) draws its masks from torch's
    global generator, so both processes draw the same B x 256 mask where one device draws a
    different 2B x 256 one. What remains is rounding: the mean of two means of B losses against
    one mean of 2B.

    With SGD that rounding stays at ~1e-8 (1e-5 asserted). Adam divides each update by the root
    of its running squared gradient, so for the few kernel entries whose gradient nearly cancels
    a rounding difference becomes a visible one: two hand-written torch loops (DDP at 2 x 16 and
    one process at 32, the same float32 convnet, no trainmesh) already differ by 2.6e-5 in 12 of
    the 10368 entries of the second convolution's kernel after 16 steps. So Adam is held to 1e-4.
    """
    ddp, single = legs.out(f"plain_ddp_{optimizer}"), legs.out(f"plain_single_{optimizer}")
    ours, reference = load(ddp)["variables"], load(single)["variables"]
    assert set(ours) == set(reference)
    assert not any("moving_" in name or "seed_generator" in name for name in reference)
    worst = {name: (ours[name] - tensor).abs().max().item() for name, tensor in reference.items()}
    print(
        f"{optimizer}: max |ddp(2 x {BATCH}) - one device({2 * BATCH})| per variable:",
        {name: f"{value:.1e}" for name, value in worst.items()},
    )
    assert max(worst.values()) <= tolerance, worst
    # the weights moved: this compares two trained models, not two copies of the initial one
    initial = load(single)["initial"]
    moved = max((tensor - initial[name]).abs().max().item() for name, tensor in reference.items())
    assert moved > 1e-3, moved


def test_saved_model_predicts_the_same_in_plain_keras(trainmesh_ddp):
    """model.save() after trainmesh's ddp training; a new process with plain Keras loads it
    (keras.saving.load_model) and predicts what the trained model predicted."""
    out = Path(f"{trainmesh_ddp}.loaded.npy")
    run_leg("load", f"{trainmesh_ddp}.keras", f"{trainmesh_ddp}.x.npy", str(out))
    trained, direct, loaded = (
        np.load(f"{trainmesh_ddp}.pred.npy"),
        np.load(f"{trainmesh_ddp}.direct.npy"),
        np.load(out),
    )
    assert loaded.shape == trained.shape == (64, 10)
    assert np.abs(loaded - trained).max() <= 1e-6, np.abs(loaded - trained).max()
    assert np.abs(trained - direct).max() <= 1e-6


@pytest.mark.slow
def test_zero1_trains_the_guides_model_to_ddps_weights(legs, trainmesh_ddp):
    # zero1 shards Adam's state across the ranks; the arithmetic is ddp's, so every variable
    # (moving statistics included) is bit-identical on every rank.
    out = legs.out("zero1")
    for rank in (0, 1):
        expected, got = load(trainmesh_ddp, rank)["variables"], load(out, rank)["variables"]
        assert expected.keys() == got.keys()
        for name, tensor in expected.items():
            assert torch.equal(got[name], tensor), (rank, name)
