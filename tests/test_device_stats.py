"""device_stats.py: the psutil figures under Lightning's keys, or Lightning's error where psutil is missing,
compared with Lightning 2.6's own functions (lightning.pytorch.accelerators.cpu / mps)."""

import pytest

from trainmesh.device_stats import get_cpu_stats, get_mps_stats

cpu = pytest.importorskip("lightning.pytorch.accelerators.cpu")
mps = pytest.importorskip("lightning.pytorch.accelerators.mps")


@pytest.mark.parametrize(
    ("ours", "theirs"), [(get_cpu_stats, cpu.get_cpu_stats), (get_mps_stats, mps.get_device_stats)]
)
def test_the_figures_or_the_error_are_lightnings(ours, theirs):
    try:
        expected = sorted(theirs())
    except ModuleNotFoundError as error:  # no psutil here: the same error, word for word
        with pytest.raises(ModuleNotFoundError) as caught:
            ours()
        assert str(caught.value) == str(error)
    else:
        assert sorted(ours()) == expected  # the keys (the values move between calls)
