"""trainmesh.keras.step_means without processes: which Keras Means a step updated once (a tracker of a
train_step of one's own) and which by its samples, also at a step where this process holds one sample."""

import os

os.environ["KERAS_BACKEND"] = "torch"

import pytest  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
from trainmesh.keras import step_means  # noqa: E402


def _step(tracker, samples, values):
    """One step: the tracker takes the batch's mean once, the other Mean each sample."""
    tracker.update_state(torch.tensor(values).mean())
    samples.update_state(torch.tensor(values))


def test_a_tracker_is_weighed_at_a_step_of_one_sample_as_the_first_step_showed():
    """Before: the last step of 11 samples on 2 processes at 4 each (2 + 1) left the 1-sample process's
    tracker unweighed while the other weighed its own: the step counted 2 * 2/3 + 1 instead of 2."""
    tracker, samples = keras.metrics.Mean(name="tracker"), keras.metrics.Mean(name="samples")
    known: dict[int, bool] = {}
    before = [(m, m.total.value.clone(), m.count.value.clone()) for m in (tracker, samples)]
    _step(tracker, samples, [1.0, 2.0, 3.0, 4.0])
    step_means.learn_once_per_step(before, 4, known)
    assert known == {id(tracker): True, id(samples): False}

    before = [(m, m.total.value.clone(), m.count.value.clone()) for m in (tracker, samples)]
    _step(tracker, samples, [6.0])
    share = 2 * 1 / 3  # N b_r / B: this process's 1 of the step's 3 samples, 2 processes
    step_means.weigh_step_means(before, 1, share, {}, known)
    assert float(tracker.count.value) == pytest.approx(1 + share)  # weighed
    assert float(tracker.total.value) == pytest.approx(2.5 + 6.0 * share)
    assert float(samples.count.value) == 5 and float(samples.total.value) == 16  # a Mean of samples: as is


def test_without_an_earlier_step_one_sample_is_taken_as_samples():
    tracker = keras.metrics.Mean(name="tracker")
    before = [(tracker, tracker.total.value.clone(), tracker.count.value.clone())]
    tracker.update_state(torch.tensor(6.0))
    step_means.weigh_step_means(before, 1, 0.5, {}, {})
    assert float(tracker.count.value) == 1  # nothing tells it from a Mean of one sample
