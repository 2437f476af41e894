from types import SimpleNamespace

import pytest
import torch

from trainmesh.callbacks.lr_monitor import LearningRateMonitor, optimizer_names
from trainmesh.trainer.optimizers import SchedulerConfig


class FakeLogger:
    def __init__(self):
        self.records = []

    def log_metrics(self, metrics, step):
        self.records.append((step, dict(metrics)))


def params(n=1):
    return [torch.nn.Parameter(torch.zeros(2)) for _ in range(n)]


# The first optimizer built in a process pays torch's one-time lazy imports (about 1 s); pay it
# at collection so that no single test carries it.
torch.optim.SGD(params(), lr=0.1)


def make_trainer(optimizers=(), configs=(), **overrides):
    values = dict(
        current_epoch=0,
        global_step=0,
        is_global_zero=True,
        sanity_checking=False,
        fast_dev_run=0,
        loggers=[FakeLogger()],
        optimizers=list(optimizers),  # the program's own optimizers, as Lightning's trainer holds them
        lr_scheduler_configs=list(configs),
        log_every_n_steps=1,
        should_stop=False,
        loop=SimpleNamespace(batches_stepped=0),  # the loggers' step
        runtime=SimpleNamespace(device=torch.device("cpu")),
        callback_metrics={},
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def names_of(trainer):
    return [names for names, _, _ in optimizer_names(trainer)]


def test_one_optimizer_one_group():
    assert names_of(make_trainer([torch.optim.SGD(params(), lr=0.1)])) == [["lr-SGD"]]


def test_several_param_groups_get_pg_suffixes_or_their_names():
    p = params(3)
    plain = torch.optim.SGD([{"params": [p[0]]}, {"params": [p[1]], "lr": 0.01}], lr=0.1)
    named = torch.optim.Adam([{"params": [p[2]], "name": "head"}], lr=0.1)
    assert names_of(make_trainer([plain, named])) == [["lr-SGD/pg1", "lr-SGD/pg2"], ["lr-Adam/head"]]


def test_optimizers_of_one_class_are_numbered():
    optimizers = [torch.optim.Adam(params(), lr=0.1) for _ in range(3)] + [torch.optim.SGD(params(), lr=0.1)]
    assert names_of(make_trainer(optimizers)) == [["lr-Adam"], ["lr-Adam-1"], ["lr-Adam-2"], ["lr-SGD"]]


def test_scheduled_optimizers_come_first_and_config_names_win():
    first, second = torch.optim.SGD(params(), lr=0.1), torch.optim.Adam(params(), lr=0.1)
    config = SchedulerConfig(torch.optim.lr_scheduler.StepLR(second, step_size=1), name="my-lr")
    assert names_of(make_trainer([first, second], [config])) == [["my-lr"], ["lr-SGD"]]


def test_duplicate_names_are_an_error():
    p = params(2)
    optimizer = torch.optim.SGD([{"params": [p[0]], "name": "a"}, {"params": [p[1]], "name": "a"}], lr=0.1)
    with pytest.raises(ValueError, match="cannot have multiple parameter groups with identical `name`"):
        names_of(make_trainer([optimizer]))
    # two optimizers whose names collide (Lightning logs one over the other): trainmesh refuses
    first = torch.optim.Adam([p[0]], lr=0.1)
    config = SchedulerConfig(torch.optim.lr_scheduler.StepLR(first, step_size=1), name="lr-SGD")
    with pytest.raises(ValueError, match="distinct 'name'"):
        names_of(make_trainer([first, torch.optim.SGD([p[1]], lr=0.1)], [config]))


def test_momentum_of_sgd_and_adam():
    sgd = torch.optim.SGD(params(), lr=0.1, momentum=0.9)
    adam = torch.optim.Adam(params(), lr=0.01, betas=(0.8, 0.99))
    monitor = LearningRateMonitor(log_momentum=True)
    stats = monitor.extract_stats(make_trainer([sgd, adam]))
    assert stats == pytest.approx({"lr-SGD": 0.1, "lr-SGD-momentum": 0.9, "lr-Adam": 0.01, "lr-Adam-momentum": 0.8})
    assert monitor.last_momentum_values["lr-Adam-momentum"] == pytest.approx(0.8)


def test_momentum_warning_for_an_optimizer_without_one():
    trainer = make_trainer([torch.optim.Adagrad(params(), lr=0.1)])
    with pytest.warns(RuntimeWarning, match="some optimizers do not have momentum"):
        LearningRateMonitor(log_momentum=True).on_train_start(trainer, None)


def test_step_interval_logs_at_batch_start_at_the_loggers_step():
    optimizer = torch.optim.SGD(params(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    trainer = make_trainer([optimizer], [SchedulerConfig(scheduler, interval="step")])
    monitor = LearningRateMonitor()
    monitor.on_train_start(trainer, None)
    monitor.on_train_epoch_start(trainer, None)  # the scheduler steps per step: nothing at epoch start
    for batch_idx in range(4):
        monitor.on_train_batch_start(trainer, None, None, batch_idx)
        if batch_idx % 2 == 1:  # two batches accumulated per optimizer step
            optimizer.step()
            scheduler.step()
            trainer.loop.batches_stepped += 1
    # as Lightning: each batch at its start, at the batches that stepped before it
    assert trainer.loggers[0].records == [(0, {"lr-SGD": 1.0}), (0, {"lr-SGD": 1.0}), (1, {"lr-SGD": 0.5})] + [
        (1, {"lr-SGD": 0.5})
    ]
    assert monitor.lrs == {"lr-SGD": [1.0, 1.0, 0.5, 0.5]}
    assert trainer.callback_metrics["lr-SGD"] == torch.tensor(0.5)  # as Lightning's, in callback_metrics too


def test_epoch_interval_scheduler_logs_at_epoch_start():
    optimizer = torch.optim.SGD(params(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    trainer = make_trainer([optimizer], [SchedulerConfig(scheduler, interval="epoch", name="lr")])
    monitor = LearningRateMonitor()
    for epoch in range(2):
        trainer.current_epoch = epoch
        monitor.on_train_epoch_start(trainer, None)
        monitor.on_train_batch_start(trainer, None, None, 0)
        trainer.loop.batches_stepped += 1
        optimizer.step()
        scheduler.step()
    assert trainer.loggers[0].records == [(0, {"lr": 1.0}), (1, {"lr": pytest.approx(0.1)})]


def test_logging_interval_epoch_overrides_the_schedulers_interval():
    optimizer = torch.optim.SGD(params(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    trainer = make_trainer([optimizer], [SchedulerConfig(scheduler, interval="step")])
    monitor = LearningRateMonitor(logging_interval="epoch")
    monitor.on_train_epoch_start(trainer, None)
    monitor.on_train_batch_start(trainer, None, None, 0)
    assert trainer.loggers[0].records == [(0, {"lr-SGD": 1.0})]


def test_log_every_n_steps_is_respected():
    trainer = make_trainer([torch.optim.SGD(params(), lr=0.1)], log_every_n_steps=3)
    monitor = LearningRateMonitor(logging_interval="step")
    for batch_idx in range(7):
        monitor.on_train_batch_start(trainer, None, None, batch_idx)
        trainer.loop.batches_stepped += 1
    assert [step for step, _ in trainer.loggers[0].records] == [2, 5]  # the batches whose step makes 3, 6


def test_weight_decay_is_logged_when_asked():
    trainer = make_trainer([torch.optim.AdamW(params(), lr=0.1, weight_decay=0.01)])
    LearningRateMonitor(log_weight_decay=True).on_train_epoch_start(trainer, None)
    assert trainer.loggers[0].records == [(0, {"lr-AdamW": 0.1, "lr-AdamW-weight_decay": 0.01})]


def test_every_logger_gets_the_values_on_every_rank():
    """As Lightning's: each logger on each rank (its loggers, and trainmesh's, write on rank 0 only;
    a program's own logger gets rank 1's values too: test_lightning_members_ddp.py measures it)."""
    loggers = [FakeLogger(), FakeLogger()]
    trainer = make_trainer([torch.optim.SGD(params(), lr=0.1)], loggers=loggers)
    LearningRateMonitor().on_train_epoch_start(trainer, None)
    assert all(logger.records == [(0, {"lr-SGD": 0.1})] for logger in loggers)
    other_rank = make_trainer([torch.optim.SGD(params(), lr=0.1)], is_global_zero=False)
    LearningRateMonitor().on_train_epoch_start(other_rank, None)
    assert other_rank.loggers[0].records == [(0, {"lr-SGD": 0.1})]


def test_no_logger_is_an_error_at_setup():
    with pytest.raises(ValueError, match="`LearningRateMonitor` callback with `Trainer` that has no logger"):
        LearningRateMonitor().setup(make_trainer(loggers=[]), None, "fit")
    LearningRateMonitor().setup(make_trainer(loggers=[], fast_dev_run=1), None, "fit")
    LearningRateMonitor().setup(make_trainer(loggers=[]), None, "test")


def test_invalid_interval():
    with pytest.raises(ValueError, match="logging_interval"):
        LearningRateMonitor(logging_interval="batch")
