"""The accelerators' ``get_device_stats`` (accelerator_types.py, accelerators/cpu.py, mps.py) against
Lightning 2.6's: ``MPSAccelerator`` reports psutil's host figures under ``M1_*`` keys and
``CPUAccelerator`` under ``cpu_*`` (psutil stood in by a module with fixed readings, as it is not
installed here); without psutil every one raises Lightning's ``ModuleNotFoundError`` with its text."""

import sys
import types

import pytest
import torch

from trainmesh import accelerator_types
from trainmesh.accelerators import cpu as tm_cpu
from trainmesh.accelerators import mps as tm_mps

pytest.importorskip("lightning.pytorch")
import lightning.pytorch.accelerators as pl_accelerators  # noqa: E402
import lightning.pytorch.accelerators.cpu as pl_cpu  # noqa: E402
import lightning.pytorch.accelerators.mps as pl_mps  # noqa: E402


def _calls(accelerators, cpu, mps):
    device = torch.device("cpu")
    return {
        "MPSAccelerator": lambda: accelerators.MPSAccelerator().get_device_stats(device),
        "mps.get_device_stats": mps.get_device_stats,
        "CPUAccelerator": lambda: accelerators.CPUAccelerator().get_device_stats(device),
        "cpu.get_cpu_stats": cpu.get_cpu_stats,
    }


def _outcomes(calls):
    found = {}
    for name, call in calls.items():
        try:
            found[name] = call()
        except Exception as error:  # noqa: BLE001 - the error is the outcome
            found[name] = (type(error).__name__, str(error))
    return found


def test_device_stats_as_lightning_s(monkeypatch):
    readings = types.SimpleNamespace(percent=12.5)
    fake = types.ModuleType("psutil")
    fake.virtual_memory = lambda: readings
    fake.swap_memory = lambda: types.SimpleNamespace(percent=3.0)
    fake.cpu_percent = lambda: 50.0
    monkeypatch.setitem(sys.modules, "psutil", fake)
    monkeypatch.setattr(pl_cpu, "_PSUTIL_AVAILABLE", True)
    monkeypatch.setattr(pl_mps, "_PSUTIL_AVAILABLE", True)
    theirs = _outcomes(_calls(pl_accelerators, pl_cpu, pl_mps))
    ours = _outcomes(_calls(accelerator_types, tm_cpu, tm_mps))
    assert theirs["MPSAccelerator"] == {"M1_vm_percent": 12.5, "M1_percent": 50.0, "M1_swap_percent": 3.0}
    assert ours == theirs


@pytest.mark.skipif("psutil" in sys.modules, reason="psutil is installed")
def test_without_psutil_the_same_error():
    theirs = _outcomes(_calls(pl_accelerators, pl_cpu, pl_mps))
    ours = _outcomes(_calls(accelerator_types, tm_cpu, tm_mps))
    assert theirs["CPUAccelerator"][0] == "ModuleNotFoundError"
    assert ours == theirs
