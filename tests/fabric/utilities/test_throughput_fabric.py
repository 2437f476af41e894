"""Fabric's ``Throughput`` and ``ThroughputMonitor(fabric)`` beside Lightning Fabric 2.6's: the same updates
(times injected, as Fabric's own tests do: no clock is read) give the same metrics dicts, the same errors,
and the monitor logs them through ``fabric.log_dict`` at the same steps."""

from __future__ import annotations

import pytest

# (time, batches, samples, lengths, flops) per update: two windows' worth and more
UPDATES = [(0.5 * (i + 1) + 0.01 * i * i, i + 1, 4 * (i + 1), 40 * (i + 1) + i, 1000 + 10 * i) for i in range(7)]


def _feed(throughput_class, updates, *, lengths=True, flops=True, **kwargs):
    throughput = throughput_class(**kwargs)
    seen = []
    for time, batches, samples, length, flop in updates:
        throughput.update(
            time=time,
            batches=batches,
            samples=samples,
            lengths=length if lengths else None,
            flops=flop if flops else None,
        )
        seen.append(throughput.compute())
    return seen


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window_size": 3},
        {"window_size": 3, "world_size": 2, "available_flops": 5e3},
        {"window_size": 4, "world_size": 3, "separator": "|", "lengths": False},
        {"window_size": 2, "available_flops": 1e4, "flops": False},
        {"window_size": 100},  # never full: the totals only
    ],
)
def test_throughput_s_metrics_are_fabric_s(kwargs):
    from lightning.fabric.utilities.throughput import Throughput as Theirs

    from trainmesh.fabric.utilities.throughput import Throughput as Ours

    theirs, ours = _feed(Theirs, UPDATES, **kwargs), _feed(Ours, UPDATES, **kwargs)
    assert ours == theirs
    assert any("device/samples_per_sec" in m or "device|samples_per_sec" in m for m in ours) == (
        kwargs["window_size"] <= len(UPDATES)
    )


@pytest.mark.parametrize(
    "updates",
    [
        [dict(time=1.0, batches=1, samples=1), dict(time=1.0, batches=2, samples=2)],  # time does not increase
        [dict(time=1.0, batches=2, samples=1)],  # fewer samples than batches
        [dict(time=1.0, batches=1, samples=2, lengths=1)],  # shorter lengths than samples
        [dict(time=1.0, batches=1, samples=1), dict(time=2.0, batches=2, samples=2, lengths=3)],  # lengths late
    ],
)
def test_throughput_s_errors_are_fabric_s(updates):
    from lightning.fabric.utilities.throughput import Throughput as Theirs

    from trainmesh.fabric.utilities.throughput import Throughput as Ours

    raised = []
    for cls in (Theirs, Ours):
        throughput = cls(window_size=2)
        with pytest.raises((ValueError, RuntimeError)) as error:
            for update in updates:
                throughput.update(**update)
        raised.append((error.type, str(error.value)))
    assert raised[0] == raised[1]


class _Rows:
    """A logger that keeps what ``log_metrics`` receives."""

    def __init__(self):
        self.rows = []

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))


def _monitor_rows(fabric_class, monitor_class):
    logger = _Rows()
    fabric = fabric_class(accelerator="cpu", devices=1, loggers=[logger])
    monitor = monitor_class(fabric, window_size=2)
    logged = []
    for i, (time, batches, samples, length, flop) in enumerate(UPDATES[:4]):
        monitor.update(time=time, batches=batches, samples=samples, lengths=length, flops=flop)
        logged.append(monitor.compute_and_log(step=10 * i if i == 2 else None))
    monitor.reset()
    return logger.rows, logged, monitor.available_flops, monitor.world_size, monitor.step


def test_throughput_monitor_logs_through_fabric_as_fabric_s():
    import lightning.fabric
    from lightning.fabric.utilities.throughput import ThroughputMonitor as Theirs

    import trainmesh.fabric
    from trainmesh.fabric.utilities.throughput import ThroughputMonitor as Ours

    theirs = _monitor_rows(lightning.fabric.Fabric, Theirs)
    ours = _monitor_rows(trainmesh.fabric.Fabric, Ours)
    assert ours == theirs
    assert [step for step, _ in ours[0]] == [0, 1, 20, 21]


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA GeForce RTX 4090", "Made-up GPU"]
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_get_available_flops_reads_fabric_s_table(monkeypatch, name, dtype):
    import warnings

    import lightning.fabric.utilities.throughput as theirs_module
    import torch

    import trainmesh.fabric.utilities.throughput as ours_module

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr("lightning.fabric.accelerators.cuda._is_ampere_or_later", lambda device=None: True)
    device, torch_dtype = torch.device("cuda", 0), getattr(torch, dtype)
    answers = []
    for module in (theirs_module, ours_module):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            answers.append((module.get_available_flops(device, torch_dtype), [str(w.message) for w in caught]))
        assert module.get_available_flops(torch.device("cpu"), torch_dtype) is None
    assert answers[1] == answers[0]
