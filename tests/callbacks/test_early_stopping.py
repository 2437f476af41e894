import logging
import math
from types import SimpleNamespace

import pytest
import torch

from trainmesh.callbacks.early_stopping import EarlyStopping as Callback
from trainmesh.callbacks.early_stopping import EarlyStoppingReason


class FakeRuntime:
    device = torch.device("cpu")

    def __init__(self, other_rank_stops=False):
        self.other_rank_stops = other_rank_stops
        self.reduce_ops = []

    def broadcast(self, obj, src=0):
        return obj

    def all_reduce(self, value, op="mean"):
        self.reduce_ops.append(op)
        # Stands in for another rank whose own check said "stop".
        return torch.ones_like(value) if self.other_rank_stops else value

    def barrier(self, name=None):
        return None


def make_trainer(**overrides):
    values = dict(
        current_epoch=0,
        global_step=0,
        callback_metrics={},
        is_global_zero=True,
        global_rank=0,
        world_size=1,
        should_stop=False,
        runtime=FakeRuntime(),
        sanity_checking=False,
        fast_dev_run=0,
        stage="fit",
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def EarlyStopping(**kwargs):  # noqa: N802 - these tests feed its hooks by hand, with no setup
    """The callback as its setup leaves it under the Trainer's defaults (validation at every epoch's end:
    the check at on_train_epoch_end), unless a test says where it checks."""
    kwargs.setdefault("check_on_train_epoch_end", True)
    return Callback(**kwargs)


def run_epochs(callback, trainer, values, key="val_loss"):
    """Feed one value per epoch; return the epoch at which the trainer was told to stop, or None."""
    for value in values:
        trainer.callback_metrics = {key: value}
        callback.on_train_epoch_end(trainer, None)
        if trainer.should_stop:
            return trainer.current_epoch
        trainer.current_epoch += 1
    return None


def test_stops_after_patience_checks_without_improvement():
    callback, trainer = EarlyStopping(monitor="val_loss", patience=2), make_trainer()
    assert run_epochs(callback, trainer, [1.0, 0.8, 0.9, 0.85, 0.7]) == 3
    assert callback.stopped_epoch == 3
    assert callback.wait_count == 2
    assert callback.best_score == pytest.approx(0.8)
    assert callback.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "did not improve in the last 2" in callback.stopping_reason_message
    assert trainer.runtime.reduce_ops == ["max"] * 4


def test_an_improvement_resets_the_wait():
    callback, trainer = EarlyStopping(monitor="val_loss", patience=2), make_trainer()
    assert run_epochs(callback, trainer, [1.0, 1.1, 0.9, 1.0, 0.8, 0.85]) is None
    assert callback.wait_count == 1
    assert callback.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_min_delta_counts_small_gains_as_no_improvement():
    callback, trainer = EarlyStopping(monitor="val_loss", patience=2, min_delta=0.1), make_trainer()
    assert run_epochs(callback, trainer, [1.0, 0.95, 0.91]) == 2
    assert callback.best_score == pytest.approx(1.0)


def test_mode_max():
    callback, trainer = EarlyStopping(monitor="acc", mode="max", patience=1, min_delta=0.01), make_trainer()
    assert run_epochs(callback, trainer, [0.5, 0.6, 0.605], key="acc") == 2
    assert callback.best_score == pytest.approx(0.6)


def test_stopping_threshold_stops_at_once():
    callback, trainer = EarlyStopping(monitor="acc", mode="max", stopping_threshold=0.9), make_trainer()
    assert run_epochs(callback, trainer, [0.5, 0.95], key="acc") == 1
    assert callback.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD


def test_divergence_threshold_stops_at_once():
    callback, trainer = EarlyStopping(monitor="val_loss", divergence_threshold=5.0), make_trainer()
    assert run_epochs(callback, trainer, [1.0, 4.0, 6.0]) == 2
    assert callback.stopping_reason is EarlyStoppingReason.DIVERGENCE_THRESHOLD


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_values_stop(bad):
    callback, trainer = EarlyStopping(monitor="val_loss", patience=10), make_trainer()
    assert run_epochs(callback, trainer, [1.0, bad]) == 1
    assert callback.stopping_reason is EarlyStoppingReason.NON_FINITE_METRIC


def test_non_finite_values_only_count_as_no_improvement_without_check_finite():
    callback = EarlyStopping(monitor="val_loss", patience=2, check_finite=False)
    assert run_epochs(callback, make_trainer(), [1.0, math.nan, math.nan]) == 2
    assert callback.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED


def test_tensor_values_are_accepted():
    callback = EarlyStopping(monitor="val_loss", patience=1)
    assert run_epochs(callback, make_trainer(), [torch.tensor(1.0), torch.tensor(2.0)]) == 1


def test_missing_monitor_is_an_error_that_lists_the_logged_metrics():
    trainer = make_trainer(callback_metrics={"train_loss": 1.0, "val_acc": 0.5})
    with pytest.raises(RuntimeError, match=r"'val_loss'.*\['train_loss', 'val_acc'\]"):
        EarlyStopping(monitor="val_loss").on_train_epoch_end(trainer, None)


def test_missing_monitor_is_skipped_when_not_strict():
    trainer = make_trainer(callback_metrics={"train_loss": 1.0})
    callback = EarlyStopping(monitor="val_loss", strict=False)
    callback.on_train_epoch_end(trainer, None)
    assert not trainer.should_stop and callback.wait_count == 0
    assert trainer.runtime.reduce_ops == []  # every rank skips alike: no collective is started


def test_another_ranks_stop_stops_this_rank():
    trainer = make_trainer(runtime=FakeRuntime(other_rank_stops=True))
    callback = EarlyStopping(monitor="val_loss")
    assert run_epochs(callback, trainer, [1.0]) == 0
    # Lightning's: this rank's reason stays "not stopped"; the message is its own check's words
    assert callback.stopping_reason is EarlyStoppingReason.NOT_STOPPED
    assert callback.stopping_reason_message == "Metric val_loss improved. New best score: 1.000"


def test_no_checks_in_sanity_check_or_fast_dev_run():
    for trainer in (make_trainer(sanity_checking=True), make_trainer(fast_dev_run=1)):
        callback = EarlyStopping(monitor="val_loss", patience=0)
        assert run_epochs(callback, trainer, [1.0, 2.0]) is None
        assert callback.best_score == math.inf


def test_check_after_validation_instead_of_train_epoch_end():
    trainer = make_trainer(callback_metrics={"val_loss": 1.0})
    callback = EarlyStopping(monitor="val_loss", patience=0, check_on_train_epoch_end=False)
    callback.on_train_epoch_end(trainer, None)
    assert callback.best_score == math.inf
    callback.on_validation_end(trainer, None)
    assert callback.best_score == 1.0
    trainer.callback_metrics = {"val_loss": 2.0}
    callback.on_validation_end(trainer, None)
    assert trainer.should_stop


def test_validate_stage_does_not_count():
    trainer = make_trainer(stage="validate", callback_metrics={"val_loss": 1.0})
    callback = EarlyStopping(monitor="val_loss", check_on_train_epoch_end=False)
    callback.on_validation_end(trainer, None)
    assert callback.best_score == math.inf


def test_state_dict_round_trip():
    callback = EarlyStopping(monitor="val_loss", patience=3)
    run_epochs(callback, make_trainer(), [1.0, 0.5, 0.7])
    restored = EarlyStopping(monitor="val_loss", patience=3)
    restored.load_state_dict(callback.state_dict())
    assert restored.state_dict() == callback.state_dict()
    assert (restored.wait_count, restored.best_score) == (1, 0.5)
    trainer = make_trainer(current_epoch=3)
    assert run_epochs(restored, trainer, [0.6, 0.6]) == 4  # the wait carried over


def test_verbose_logs_as_lightning_on_each_rank_or_rank_zero_only(caplog, capsys):
    # Lightning 2.6's _log_info: its logger (not stdout), every rank's own words, "[rank: N] " where several
    with caplog.at_level(logging.INFO, logger="trainmesh"):
        EarlyStopping(monitor="val_loss", verbose=True).on_train_epoch_end(
            make_trainer(callback_metrics={"val_loss": 1.0}, global_rank=0, world_size=1), None
        )
        assert caplog.messages == ["Metric val_loss improved. New best score: 1.000"]  # Lightning 2.6's words
        caplog.clear()
        other_rank = dict(callback_metrics={"val_loss": 1.0}, is_global_zero=False, global_rank=1, world_size=2)
        EarlyStopping(monitor="val_loss", verbose=True).on_train_epoch_end(make_trainer(**other_rank), None)
        assert caplog.messages == ["[rank: 1] Metric val_loss improved. New best score: 1.000"]
        caplog.clear()
        quiet = EarlyStopping(monitor="val_loss", verbose=True, log_rank_zero_only=True)
        quiet.on_train_epoch_end(make_trainer(**other_rank), None)
        assert caplog.messages == []
    assert capsys.readouterr().out == ""


def test_state_key_tells_callbacks_apart():
    assert EarlyStopping(monitor="a").state_key != EarlyStopping(monitor="b").state_key


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"monitor": "x", "mode": "up"}, "mode"),
        ({"monitor": "x", "patience": -1}, "patience"),
        ({"monitor": ""}, "monitor"),
    ],
)
def test_invalid_arguments_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EarlyStopping(**kwargs)
