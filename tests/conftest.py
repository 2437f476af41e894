import os
import sys
from pathlib import Path

import pytest
import torch

# Tests import small shared models from tests/helpers.
sys.path.insert(0, str(Path(__file__).parent))

from helpers.xdist_groups import FileGroups, group_files  # noqa: E402


def pytest_collection_modifyitems(config, items):
    group_files(items, longest_first=hasattr(config, "workerinput"))  # in an xdist worker
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # pytest-xdist (-n 2, pyproject's addopts): a test file's tests stay on one worker, so its
    # module fixtures (most launch processes) run once; see helpers/xdist_groups.py.
    return FileGroups(config, log) if config.getvalue("dist") == "loadgroup" else None


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch):
    # Two cores: keep torch from oversubscribing when tests start subprocesses.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    yield


@pytest.fixture(scope="module", autouse=True)
def _no_process_group_from_another_file():
    # A Trainer run in this process (strategy="ddp", devices=1) keeps its one-process group until
    # exit. Under pytest-xdist the files a worker runs, and their order, change from run to run, so
    # each file starts as it would alone: without a group another file left.
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() == 1:
        dist.destroy_process_group()
    yield
