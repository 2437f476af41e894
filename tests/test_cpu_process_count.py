"""CPU processes beyond the machine's cores warn, and far beyond are refused (issue 12, item 3).

No process starts here: the check runs where the devices are resolved, and the core counts are
monkeypatched.
"""

import warnings

import pytest

import trainmesh as tm
from trainmesh import accelerators
from trainmesh.accelerators import resolve_devices


@pytest.fixture
def cores(monkeypatch):
    def set_cores(logical, physical):
        monkeypatch.setattr(accelerators, "logical_cpu_count", lambda: logical)
        monkeypatch.setattr(accelerators, "physical_cpu_count", lambda: physical)

    return set_cores


def test_up_to_the_physical_cores_says_nothing(cores):
    cores(logical=8, physical=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_devices("cpu", 4) == [0, 1, 2, 3]
        assert resolve_devices("cpu", "auto") == [0]


def test_more_processes_than_physical_cores_warns(cores):
    cores(logical=4, physical=2)
    with pytest.warns(
        UserWarning,
        match=r"devices=6 on CPU starts 6 processes on this node, which has 2 physical "
        r"CPU core\(s\) \(4 logical\): each process gets about 0.33 of a core",
    ):
        assert resolve_devices("cpu", 6) == list(range(6))


def test_far_more_processes_than_cores_is_refused_before_any_process_starts(cores, monkeypatch):
    cores(logical=2, physical=2)
    started = []
    monkeypatch.setattr("trainmesh.runtime_choice.build_launcher", lambda *a, **k: started.append(a))
    with pytest.raises(
        ValueError,
        match=r"devices=99 on CPU would start 99 processes on this node, but it has only "
        r"2 logical CPU core\(s\).*Use fewer devices: at most 2",
    ):
        tm.Trainer(accelerator="cpu", devices=99, logger=False)
    assert not started


def test_the_bound_is_four_times_the_logical_cores(cores):
    cores(logical=2, physical=2)
    with pytest.warns(UserWarning, match="about 0.25 of a core"):
        resolve_devices("cpu", 8)  # 8 <= 4 x 2: a warning, not an error (tests run devices=8 here)
    with pytest.raises(ValueError, match="no more than 8"):
        resolve_devices("cpu", 9)
    with pytest.raises(ValueError, match="devices=9 on CPU"):
        resolve_devices("cpu", list(range(9)))


def test_gpu_devices_are_not_counted_against_cpu_cores(cores, monkeypatch):
    cores(logical=1, physical=1)
    monkeypatch.setattr(accelerators, "device_count", lambda device_type: 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_devices("cuda", 8) == list(range(8))


def test_physical_cores_come_from_cpuinfo(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    # Two sockets, two cores each, two hyperthreads per core: 8 logical CPUs, 4 physical cores.
    info.write_text(
        "\n\n".join(f"processor\t: {i}\nphysical id\t: {i // 4}\ncore id\t\t: {(i // 2) % 2}" for i in range(8)) + "\n"
    )
    assert accelerators._physical_cores_from_cpuinfo(str(info)) == 4
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 50\n\nprocessor\t: 1\nBogoMIPS\t: 50\n")
    assert accelerators._physical_cores_from_cpuinfo(str(tmp_path / "arm")) is None
    assert accelerators._physical_cores_from_cpuinfo(str(tmp_path / "missing")) is None
    # Without psutil or core ids, the logical count stands in.
    monkeypatch.setattr(accelerators, "logical_cpu_count", lambda: 3)
    monkeypatch.setattr(accelerators, "_physical_cores_from_cpuinfo", lambda: None)
    monkeypatch.setitem(__import__("sys").modules, "psutil", None)
    assert accelerators.physical_cpu_count() == 3


def test_one_process_reads_no_core_count(monkeypatch):
    # Every fit resolves its devices: one process cannot oversubscribe, so /proc/cpuinfo (and a
    # failed psutil import) are not read for it.
    def refuse():
        raise AssertionError("core count read for one process")

    monkeypatch.setattr(accelerators, "physical_cpu_count", refuse)
    monkeypatch.setattr(accelerators, "logical_cpu_count", refuse)
    assert resolve_devices("cpu", 1) == [0]
