import io
import pickle
from types import SimpleNamespace

import pytest
from rich.console import Console

from trainmesh.callbacks import ThroughputMonitor
from trainmesh.callbacks.progress import DrawingProgressBar, format_metrics


def make_trainer(**overrides):
    values = dict(
        current_epoch=0,
        global_step=0,
        max_epochs=2,
        max_steps=-1,
        num_training_batches=4,
        val_loader_batches=2,
        test_loader_batches=3,
        predict_loader_batches=2,
        progress_bar_metrics={},
        is_global_zero=True,
        sanity_checking=False,
        # a monitor given: the bar makes none of its own, which would need a real run (test_throughput.py)
        callbacks=[ThroughputMonitor(count_flops=False)],
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def terminal_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)


def plain_console() -> Console:
    return Console(file=io.StringIO(), width=160)


def run_fit(bar: DrawingProgressBar, trainer, epochs: int = 2) -> None:
    module = object()
    trainer.sanity_checking = True
    bar.on_sanity_check_start(trainer, module)
    bar.on_validation_start(trainer, module)
    for i in range(trainer.val_loader_batches):
        bar.on_validation_batch_end(trainer, module, None, None, i)
    bar.on_validation_end(trainer, module)
    bar.on_sanity_check_end(trainer, module)
    trainer.sanity_checking = False
    bar.on_train_start(trainer, module)
    for epoch in range(epochs):
        trainer.current_epoch = epoch
        bar.on_train_epoch_start(trainer, module)
        for i in range(trainer.num_training_batches):
            trainer.progress_bar_metrics = {"loss": 0.23141}
            bar.on_train_batch_end(trainer, module, None, None, i)
            trainer.global_step += 1
        bar.on_validation_start(trainer, module)
        for i in range(trainer.val_loader_batches):
            bar.on_validation_batch_end(trainer, module, None, None, i)
        trainer.progress_bar_metrics = {"loss": 0.23141, "val_acc": 0.95}
        bar.on_validation_end(trainer, module)
        bar.on_train_epoch_end(trainer, module)
    bar.on_train_end(trainer, module)


def test_terminal_shows_epochs_counts_and_metrics():
    console = terminal_console()
    bar = DrawingProgressBar(console=console)
    run_fit(bar, make_trainer())
    out = console.file.getvalue()
    assert "Sanity check" in out
    assert "Epoch 0/1" in out and "Epoch 1/1" in out  # counted from 0, as Lightning's RichProgressBar
    assert "4/4" in out
    assert "loss=0.231" in out and "val_acc=0.95" in out
    assert "it/s" in out
    assert bar._progress is None  # live display stopped at train end


def test_refresh_rate_limits_updates():
    bar = DrawingProgressBar(refresh_rate=3, console=terminal_console())
    trainer = make_trainer(num_training_batches=7)
    bar.on_train_epoch_start(trainer, None)
    task = bar._progress.tasks[0]
    completed = []
    for i in range(7):
        bar.on_train_batch_end(trainer, None, None, None, i)
        completed.append(task.completed)
    assert completed == [0, 0, 3, 3, 3, 6, 6]
    bar.on_train_epoch_end(trainer, None)  # the epoch end always shows the final count
    assert task.completed == 7
    bar.on_train_end(trainer, None)


def test_unknown_number_of_batches():
    console = terminal_console()
    bar = DrawingProgressBar(console=console)
    trainer = make_trainer(num_training_batches=float("inf"), max_epochs=None)
    bar.on_train_epoch_start(trainer, None)
    for i in range(5):
        bar.on_train_batch_end(trainer, None, None, None, i)
    assert bar._progress.tasks[0].total is None
    bar.on_train_epoch_end(trainer, None)
    bar.on_train_end(trainer, None)
    out = console.file.getvalue()
    assert "5/?" in out and "Epoch 0 " in out


def test_on_exception_stops_live_display():
    bar = DrawingProgressBar(console=terminal_console())
    trainer = make_trainer()
    bar.on_train_epoch_start(trainer, None)
    bar.on_train_batch_end(trainer, None, None, None, 0)
    bar.on_validation_start(trainer, None)
    live = bar._progress.live
    assert live.is_started
    bar.on_exception(trainer, None, RuntimeError("boom"))
    assert not live.is_started and bar._progress is None
    # a fresh run can start a new live display on the same console afterwards
    bar.on_test_start(trainer, None)
    bar.on_test_end(trainer, None)
    assert bar._progress is None


def test_test_and_predict_bars_are_transient():
    console = terminal_console()
    bar = DrawingProgressBar(console=console)
    trainer = make_trainer()
    bar.on_test_start(trainer, None)
    for i in range(3):
        bar.on_test_batch_start(trainer, None, None, i)
        bar.on_test_batch_end(trainer, None, None, None, i)
    assert bar._progress.tasks[0].completed == 3
    bar.on_test_end(trainer, None)
    assert bar._progress is None
    bar.on_predict_start(trainer, None)
    bar.on_predict_batch_start(trainer, None, None, 0)  # as the loop calls them
    bar.on_predict_batch_end(trainer, None, None, None, 0)
    bar.on_predict_end(trainer, None)
    assert bar._progress is None
    assert "Testing" in console.file.getvalue()


def test_plain_output_is_one_line_per_epoch():
    console = plain_console()
    bar = DrawingProgressBar(console=console)
    trainer = make_trainer()
    run_fit(bar, trainer)
    bar.on_test_start(trainer, None)
    for i in range(3):
        bar.on_test_batch_end(trainer, None, None, None, i)
    bar.on_test_end(trainer, None)
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("Epoch 0/1: 4/4 batches in 0:00:00")
    assert lines[0].endswith("loss=0.231 val_acc=0.95")
    assert lines[1].startswith("Epoch 1/1")
    assert lines[2].startswith("Testing: 3 batches")
    assert "\x1b" not in console.file.getvalue()  # no terminal control codes in CI logs


def test_default_console_writes_to_stdout(capsys):
    bar = DrawingProgressBar()
    trainer = make_trainer()
    bar.on_train_epoch_start(trainer, None)
    trainer.progress_bar_metrics = {"loss": 1.5}
    for i in range(4):
        bar.on_train_batch_end(trainer, None, None, None, i)
    bar.on_train_epoch_end(trainer, None)
    bar.on_train_end(trainer, None)
    assert "Epoch 0/1: 4/4 batches" in capsys.readouterr().out


@pytest.mark.parametrize("trainer_kwargs, bar_kwargs", [({"is_global_zero": False}, {}), ({}, {"refresh_rate": 0})])
def test_silent_off_rank_zero_and_when_disabled(trainer_kwargs, bar_kwargs):
    for console in (terminal_console(), plain_console()):
        bar = DrawingProgressBar(console=console, **bar_kwargs)
        run_fit(bar, make_trainer(**trainer_kwargs))
        assert console.file.getvalue() == ""


def test_leave_false_runs_and_cleans_up():
    bar = DrawingProgressBar(leave=False, console=terminal_console())
    run_fit(bar, make_trainer())
    assert bar._progress is None


def test_pickles_while_running():
    bar = DrawingProgressBar(console=terminal_console())
    trainer = make_trainer()
    bar.on_train_epoch_start(trainer, None)
    clone = pickle.loads(pickle.dumps(bar))
    assert clone._progress is None and clone.refresh_rate == 1
    bar.on_exception(trainer, None, KeyboardInterrupt())


def test_format_metrics_and_bad_refresh_rate():
    assert format_metrics({"loss": 0.23141, "val_acc": 0.95, "step": 7}) == "loss=0.231 val_acc=0.95 step=7"
    with pytest.raises(ValueError, match="refresh_rate"):
        DrawingProgressBar(refresh_rate=-1)
