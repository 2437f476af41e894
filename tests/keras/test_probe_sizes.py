"""A step the step probe cannot run on its samples or on a half of them (probe_sizes.py): probed again at the
run's sizes, or refused, on one process with a world size given to the probe (step_probe.refusal)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


def _fixed_batch_model(batch: int, coupled: bool, fixed: bool = True):
    """A functional model taking ``batch`` samples only (``fixed``: Input's batch_size, a reshape to a count
    fixed at build, as keras-io's switch transformer's), else a multiple of ``batch`` (a reshape to groups of
    it), whose layer of its own subtracts the batch's mean (``coupled``: a step coupling the batch's
    samples) or not."""
    import keras
    from keras import ops

    class Tokens(keras.layers.Layer):
        def call(self, inputs):
            shape = [batch * 2, 2] if fixed else [-1, batch, 4]  # the batch's tokens, or groups of samples
            flat = ops.reshape(inputs, shape)
            flat = flat - ops.mean(flat) if coupled else flat * 2.0
            return ops.reshape(flat, [-1, 4])

        def compute_output_shape(self, input_shape):  # Keras builds it on 83 samples otherwise
            return input_shape

    inputs = keras.Input((4,), batch_size=batch if fixed else None)
    model = keras.Model(inputs, keras.layers.Dense(1)(Tokens()(inputs)))
    model.compile(loss="mse", optimizer="sgd")
    return model


@pytest.mark.parametrize("coupled", [True, False])
def test_a_model_taking_each_process_s_batch_only_is_refused_naming_what_was_not_checked(coupled):
    """keras-io's switch transformer (Input(batch_size=16), tokens reshaped to 16 x 8, expert capacity and a
    load-balancing loss over them) failed on the probe's halves of 8: the probe checked nothing and 2 x 16
    trained 9.5e-3 apart (History 1.6e-2) from Keras' fit at 32, silently. Probed again at 32 and 16, it fails
    at 32, the global batch: refused, saying what could not be checked and what to do, coupled or not (nothing
    can check it). One process: not probed."""
    import keras_random_programs as programs

    from trainmesh.keras.step_probe import refusal

    programs.fresh()
    model = _fixed_batch_model(16, coupled)
    x, y = programs.data(64)
    x, y = x[:, :4], y
    model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)  # built as fit builds it
    assert refusal(model, x, y, None, None, world=1, batch_size=16) is None
    reason = refusal(model, x, y, None, None, world=2, batch_size=16)
    assert reason is not None
    for part in ("cannot check", "each process runs it on 16 samples", "failed on 32 samples", "devices=1"):
        assert part in reason, reason
    assert "Input(batch_size=...)" in reason and "any batch size" in reason and "\x1b" not in reason, reason


def test_a_model_taking_multiples_of_each_process_s_batch_is_probed_at_the_run_s_sizes():
    """A model taking multiples of 16 samples only, each process's batch: the probe's halves of 8 fail, 32 and
    its halves of 16 run (the sizes of one process at the global batch and of each process): a coupled step is
    refused with the probe's own words (not a mean), an uncoupled one passes. A step failing at each process's
    batch size (a model of 4 samples only, run at 16 each) is left to the run, which meets that error itself."""
    import keras_random_programs as programs

    from trainmesh.keras.step_probe import refusal

    programs.fresh()
    x, y = programs.data(64)
    x = x[:, :4]
    for coupled in (True, False):
        model = _fixed_batch_model(16, coupled, fixed=False)
        model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)
        reason = refusal(model, x, y, None, None, world=2, batch_size=16)
        assert (reason is not None) == coupled, reason
        assert reason is None or ("cannot check" not in reason and "32 samples" in reason), reason
    model = _fixed_batch_model(4, coupled=True)
    model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=1, verbose=0)
    assert refusal(model, x, y, None, None, world=2, batch_size=16) is None  # fails at 16, the run's own


@pytest.mark.parametrize("feed", ["pydataset", "loader"])
def test_batches_are_probed_at_the_run_s_sizes_too(feed):
    """A model taking multiples of 16 samples fed a PyDataset (or a DataLoader) of 16-sample batches: each process
    reads whole batches, so runs at 16. Before, the probe did not know that size (fit's batch_size is None with
    batches) and refused the step after its halves of 8 failed, a mean loss too; now it reads the size from the
    data, probes 32 (two batches) and its halves: the uncoupled step passes, the coupled one is refused in the
    probe's own words."""
    import keras_random_programs as programs
    import torch

    from trainmesh.keras.step_probe import refusal

    programs.fresh()
    x, y = programs.data(64)
    x = x[:, :4]
    if feed == "pydataset":
        data = programs.Rows(x, y, 16)
    else:
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)), 16)
    for coupled in (True, False):
        model = _fixed_batch_model(16, coupled, fixed=False)
        model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=1, verbose=0)
        reason = refusal(model, data, None, None, None, world=2)
        assert (reason is not None) == coupled, reason
        assert reason is None or ("cannot check" not in reason and "32 samples" in reason), reason
