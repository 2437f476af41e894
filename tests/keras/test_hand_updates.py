"""A train_step updating variables of its own by hand from its batch (hand_updates.py, through the step
probe), on one process with a world size given to it; the ddp leg: test_keras_random_draws.py[ema_step].

Before: keras_hand_update_programs' ``ema_step`` under 2 processes of 16 trained without a word; an EMA of
the inputs' mean and a count of the samples (the same program at 16 features, 128 samples: the ranks'
centres 0.21 apart, 0.10 from Keras' own fit at 32; the count 128 where Keras counts 256).
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported
sys.path.insert(0, str(Path(__file__).parent))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


def test_a_variable_updated_from_the_batch_is_refused_and_one_updated_alike_is_not():
    """An EMA of the batch's mean and a count of its samples: refused under 2 processes, naming the variable;
    a target moved towards the weights and a count of steps (the same whatever the batch): not refused; one
    process: nothing probed."""
    import keras_hand_update_programs as programs

    from trainmesh.keras.step_probe import refusal

    program = programs.hand_updated(16)
    fit = program["fit"]
    assert refusal(program["model"], fit["x"], fit["y"], None, None, world=1) is None
    reason = refusal(program["model"], fit["x"], fit["y"], None, None, world=2)
    assert reason is not None and "'hand_updated_step/centre' by hand" in reason, reason
    assert "keras.metrics.Mean" in reason and "or run on one process" in reason
    program = programs.hand_updated(16, target=True)
    assert refusal(program["model"], program["fit"]["x"], program["fit"]["y"], None, None, world=2) is None


def test_a_trainable_variable_no_backward_pass_reaches_assigned_from_the_batch_is_refused():
    """keras-io's GAN with adaptive augmentation (generative/gan_ada) assigns its trainable ``probability`` from
    the batch's accuracy of the discriminator: before, the probe compared non-trainable variables only, and 2 x 16
    stopped at the first epoch's end with the trainable variables' sums "7.50e-02 apart", unnamed (k-progs7). A
    trainable variable no backward pass reaches is compared now: refused before start, named."""
    import keras_hand_update_programs as programs

    from trainmesh.keras.step_probe import refusal

    program = programs.hand_updated(16, statistic=True)
    fit = program["fit"]
    reason = refusal(program["model"], fit["x"], fit["y"], None, None, world=2)
    assert reason is not None and "'hand_updated_step/statistic' by hand" in reason, reason
