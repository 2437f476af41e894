"""The probe of a train_step's loss (step_probe.py), on one process with a world size given to it.

Under 2 processes a train_step adding ``keras.ops.std(y_pred)`` to its loss trained apart from one
process's fit at the global batch (keras_random_programs' batch_std_step: weights 6.8e-4 apart after 2
epochs, silently); it is refused before training now (the ddp leg: test_keras_random_draws.py).
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed (pip install trainmesh[keras])"
)


def stepped(loss: str, layers: str = "dense"):
    """A keras-io custom train_step (torch) whose loss is ``loss``: the compiled mean, plus a batch
    statistic, a sum, a term over pairs, or a mean or a sum with draws from torch's own generator; with Dropout and
    BatchNormalization layers where ``layers`` says so."""
    import keras_random_programs as programs

    import keras
    from keras import ops

    class Step(keras.Model):
        def train_step(self, data):
            x, y = data
            if loss == "half_steps":  # two updates per batch, each on a half (k-custom2's half_steps)
                return self.half_steps(x, y)
            if loss == "input_grad":  # a perturbation along the raw input gradient (k-custom2's raw_grad_adv)
                x_in = x.detach().clone().requires_grad_(True)
                (grad_x,) = torch.autograd.grad(self.compute_loss(y=y, y_pred=self(x_in, training=True)), x_in)
                x = (x + 20.0 * grad_x).detach()
            self.zero_grad()
            y_pred = self(x, training=True)
            if loss in ("mean", "input_grad"):
                value = self.compute_loss(y=y, y_pred=y_pred)
            elif loss == "std":
                value = self.compute_loss(y=y, y_pred=y_pred) + 0.1 * ops.std(y_pred)
            elif loss == "sum":
                value = ops.sum(ops.square(y - y_pred))
            elif loss == "ratio":  # keras-io ner_with_transformers' loss: a mean over the positions the mask keeps
                mask = ops.cast(y > 0, "float32")
                value = ops.sum(ops.square(y - y_pred) * mask) / ops.sum(mask)
            elif loss == "pairs":  # a contrastive term over every pair of the batch's samples
                distances = ops.sum(ops.square(y_pred[:, None, :] - y_pred[None, :, :]), axis=-1)
                value = self.compute_loss(y=y, y_pred=y_pred) + 0.1 * ops.mean(ops.exp(-distances))
            elif loss == "torch_draw":  # torch's own draws, not Keras'
                noised = torch.nn.functional.dropout(y_pred, 0.2) + 0.1 * torch.randn(y.shape[0], 1)
                value = ops.mean(ops.square(y + 0.1 * torch.randn_like(y) - noised))
            elif loss == "torch_sum":
                value = ops.sum(ops.square(y + 0.1 * torch.randn_like(y) - y_pred))
            elif loss == "numpy_draw":  # numpy's global generator: no mapping sees it
                value = ops.mean(ops.square(y + 0.1 * torch.from_numpy(np.random.normal(size=y.shape)) - y_pred))
            elif loss == "coin":  # a draw not of the batch's size: the same on every process
                value = self.compute_loss(y=y, y_pred=y_pred) * (1.0 + 0.01 * float(np.random.uniform()))
            else:  # a tensor method's draw (tensor_draws.py)
                value = ops.mean(ops.square(y + 0.1 * torch.empty_like(y).normal_() - y_pred))
            value.backward()
            weights = self.trainable_weights
            with torch.no_grad():
                self.optimizer.apply([w.value.grad for w in weights], weights)
            return self.compute_metrics(x, y, y_pred)

        def half_steps(self, x, y):
            for part in (slice(0, x.shape[0] // 2), slice(x.shape[0] // 2, None)):
                self.zero_grad()
                self.compute_loss(y=y[part], y_pred=self(x[part], training=True)).backward()
                with torch.no_grad():
                    self.optimizer.apply([w.value.grad for w in self.trainable_weights], self.trainable_weights)
            return self.compute_metrics(x, y, self(x))

    programs.fresh()
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8)(inputs)
    if layers == "drawing":
        hidden = keras.layers.GaussianNoise(0.1, seed=3)(keras.layers.Dropout(0.5)(hidden))
        hidden = keras.layers.BatchNormalization()(keras.layers.Dropout(0.3, seed=7)(hidden))
    model = Step(inputs, keras.layers.Dense(1)(keras.layers.Activation("relu")(hidden)))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    return model, *programs.data(64)


@pytest.mark.parametrize(
    ("loss", "named"),
    [
        ("std", "a loss reduced by a sum gives half"),  # no relation known: the general words
        ("sum", "the loss is a sum over the batch's samples"),
        ("pairs", "a loss reduced by a sum gives half"),
        ("ratio", "the loss is a ratio over the batch: its gradients on the batch are its halves' weighted"),
        ("half_steps", "the step applies an optimizer 2 times per batch"),  # probe_facts.py
        ("input_grad", "differentiates a loss over the batch with respect to a tensor of the batch"),
    ],
)
def test_a_step_whose_loss_is_not_a_mean_is_refused(loss, named):
    """A term on a batch statistic, a loss reduced by a sum, a term over pairs, a ratio over the batch (a mean over
    the positions a mask keeps): refused under 2 processes with the gradients' relative difference (a sum: 0.5,
    each half's gradient half the whole's) and, where the gradients are the halves' sum or their mean weighted
    otherwise than 1/2 : 1/2, what the loss is (before: the general words for every one; probe_reasons.py); a step
    applying its optimizer on each half of its batch, or perturbing its inputs along their raw gradient, named from
    what it called (before: the general words; probe_facts.py),
    probed through Dropout (unseeded and seeded), GaussianNoise and BatchNormalization (half_steps too: before, its
    halves' draws did not line up and it was not probed, and trained under 2 processes apart from Keras' fit at the
    global batch, weights 9.7e-2, silently); one process: nothing probed."""
    from trainmesh.keras.step_probe import TOLERANCE, _first_batch, refusal, step_difference

    # half_steps through Dropout: its halves draw on other rows than the whole batch's, so the probe compares again
    # with Keras' draws at their expected values (probe_expected_draws.py); before, not probed: 2 x 16 trained apart
    model, x, y = stepped(loss, "drawing")
    assert refusal(model, x, y, None, None, world=1) is None
    reason = refusal(model, x, y, None, None, world=2)
    assert reason is not None
    fixes = {"ratio": "sample_weight", "half_steps": "Apply once per batch", "input_grad": "the sum over the samples"}
    fix = fixes.get(loss, "sum_over_batch_size")
    for part in ("train_step is not a mean over the batch's samples", "or run on one process", fix, named):
        assert part in reason, reason
    difference, noise, _ = step_difference(model, _first_batch(x, y, None, None))
    assert f"by {difference:.2e} of their norm" in reason and noise == 0.0
    assert difference > 10 * TOLERANCE
    if loss == "sum":
        assert abs(difference - 0.5) < 1e-5


@pytest.mark.parametrize("layers", ["dense", "drawing"])
def test_a_mean_loss_step_is_not_refused(layers):
    """keras-io's custom train_step (a mean loss), with Keras' own draws and BatchNormalization: its
    gradients and its halves' agree to float rounding (measured 4e-8 to 1e-7 of their norm)."""
    from trainmesh.keras.step_probe import TOLERANCE, _first_batch, refusal, step_difference

    model, x, y = stepped("mean", layers)
    assert refusal(model, x, y, None, None, world=2) is None
    difference, _, _ = step_difference(model, _first_batch(x, y, None, None))
    assert difference < TOLERANCE / 100


def test_the_guides_steps_are_not_refused():
    """keras-io's "customizing what happens in fit" CustomModel (validation_split, a tracker of its
    own), its GAN (two optimizers, drawing in the step), a compute_loss adding a weight penalty and a step
    reading sample weights: none refused."""
    import keras_custom_steps as steps
    import keras_run

    import keras
    from trainmesh.keras.step_probe import refusal

    model, x, y = steps.custom_step()
    assert refusal(model, x, y, None, None, world=2) is None
    for fed in (False, True):
        gan, images = steps.gan(fed)
        assert refusal(gan, images, None, None, None, world=2) is None
    x, y = keras_run.get_tabular()
    assert refusal(steps.penalized(), x, y, None, None, world=2) is None
    weighted = steps.WeightedStep([keras.Input((x.shape[1],)), keras.layers.Dense(1, activation="sigmoid")])
    weighted.compile(optimizer="adam", loss="binary_crossentropy")
    assert refusal(weighted, x, y, np.linspace(0.5, 1.5, len(x)), None, world=2) is None


@pytest.mark.parametrize("loss", ["torch_draw", "torch_sum"])
def test_torch_s_own_draws_in_a_step_are_replayed_in_the_halves(loss):
    """A step drawing from torch's generator directly (torch.randn_like, torch.randn, F.dropout): the probe tapes
    those draws in the whole batch's run and gives each half its rows, so a mean loss agrees to float rounding
    and a loss reduced by a sum is refused (its halves give half: 0.5). Before, the halves drew their own
    numbers and differed by about twice what the draws alone move the gradients, under the refusal's factor:
    the sum was not refused, and trained at 2 processes apart from one process, silently."""
    from trainmesh.keras.step_probe import TOLERANCE, _first_batch, refusal, step_difference

    model, x, y = stepped(loss)
    difference, noise, _ = step_difference(model, _first_batch(x, y, None, None))
    assert noise == 0.0
    reason = refusal(model, x, y, None, None, world=2)
    if loss == "torch_draw":
        assert difference < TOLERANCE / 100 and reason is None
    else:
        assert abs(difference - 0.5) < 1e-5 and "train_step is not a mean" in reason


def test_a_tensor_method_s_draw_is_replayed_in_the_halves():
    """A draw through a tensor method (x.normal_()) is taped and replayed by rows as torch's functions are: a
    mean loss agrees to float rounding, nothing moves torch's generator in the halves (noise 0). Before, the
    halves drew otherwise and the probe fell back to weighing the difference against what the draws moved."""
    from trainmesh.keras.step_probe import TOLERANCE, _first_batch, refusal, step_difference

    model, x, y = stepped("tensor_method")
    difference, noise, _ = step_difference(model, _first_batch(x, y, None, None))
    assert noise == 0.0 and difference < TOLERANCE / 100
    assert refusal(model, x, y, None, None, world=2) is None


@pytest.mark.parametrize("loss", ["numpy_draw", "coin"])
def test_a_draw_no_mapping_sees_is_refused_where_its_size_follows_the_batch(loss):
    """A batch-sized draw from numpy's global generator (or a torch function imported by name: the ddp leg's
    imported_draw_step) is refused, naming the generator: each process would draw the first rows of one
    process's draw. Before, the probe refused it only as a loss 'not a mean' (its halves drew otherwise), or
    not at all where the draw moved the gradients little. A scalar draw is the same on every process: passes."""
    from trainmesh.keras.step_probe import refusal

    model, x, y = stepped(loss)
    reason = refusal(model, x, y, None, None, world=2)
    if loss == "coin":
        assert reason is None
    else:
        assert "draws from numpy's global random generator a sample whose size follows the batch's" in reason


def test_the_probe_leaves_the_fit_as_it_was():
    """A fit whose training begins with the probe (a refusal on 2 processes called on one) ends
    bit-identical to Keras' own fit: every variable (optimizer's, metrics', seed generators'), History,
    torch's generator; through Dropout and BatchNormalization."""
    import keras
    from trainmesh.keras.step_probe import refusal

    class Probe(keras.callbacks.Callback):
        def __init__(self, x, y):
            super().__init__()
            self.data, self.reasons = (x, y), []

        def on_train_begin(self, logs=None):
            self.reasons.append(refusal(self.model, *self.data, None, None, world=2))

    runs = []
    for probed in (False, True):
        model, x, y = stepped("mean", "drawing")
        callbacks = [Probe(x, y)] if probed else []
        history = model.fit(x, y, batch_size=16, epochs=2, validation_split=0.25, callbacks=callbacks, verbose=0)
        variables = [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]
        runs.append((variables, history.history, torch.get_rng_state()))
    assert callbacks[0].reasons == [None]
    (before, history, generator), (after, probed_history, probed_generator) = runs
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert history == probed_history
    assert torch.equal(generator, probed_generator)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_a_step_accumulating_gradients_over_micro_batches_is_probed_by_what_it_applies(dropout):
    """keras-io's gradient accumulation within a step (4 backward passes on micro-batches, one apply): a mean, not
    refused (before: "not a mean", each pass compared, the first a quarter's; the ddp leg trains it as Keras at the
    global batch: test_keras_random_draws.py); with a Dropout on each micro-batch, refused naming the accumulation
    (before: the general words)."""
    import keras_accumulating_programs as accumulating

    from trainmesh.keras.step_probe import refusal

    program = accumulating.accumulating(16, dropout)
    model, fit = program["model"], program["fit"]
    model.fit(fit["x"][:16], fit["y"][:16], batch_size=16, epochs=1, verbose=0)  # built as fit builds it
    reason = refusal(model, fit["x"], fit["y"], None, None, world=2)
    if not dropout:
        assert reason is None
        return
    for part in ("accumulates gradients over 4 parts of its batch", "Dropout on a micro-batch", "run on one process"):
        assert part in reason, reason
