import gc
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Tests import small shared models from tests/helpers.
sys.path.insert(0, str(Path(__file__).parent))

from helpers.xdist_groups import FileGroups, group_files  # noqa: E402

# One torch thread per process, set before any fixture starts a process (module fixtures launch
# before the function-level _quiet_threads below) and before this process imports torch (torch
# reads it at import; set_num_threads where a plugin imported it first): two xdist workers share
# two cores with the tests' own processes, and a second OpenMP thread spins waiting for a core
# (test_keras_api's in-process fits: 58 CPU-s with torch's two threads, 35 with one).
# This file does not import torch itself: xdist's controller loads it before it starts its
# workers and runs no test, and its import of torch (1.9 CPU-s; 4.6 where bytecode is neither
# installed nor written, .ci/run's case) held the workers' start back. Where tests are collected,
# pytest_collection_modifyitems imports it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# The tests start hundreds of interpreters that import trainmesh: where bytecode caching is off
# (PYTHONDONTWRITEBYTECODE, as on the project's machines) each one compiled trainmesh's 200 files
# again (0.27 s of CPU a process). They (xdist's workers too) write it beside the sources, as
# Python does by default (git ignores __pycache__), and read the bytecode pip installed for
# torch, Lightning, Keras and the rest. A cache of the tests' own (PYTHONPYCACHEPREFIX, before)
# made every one of them ignore that installed bytecode: in a new venv (a clean clone's CI) they
# compiled all they imported again (two workers collecting the suite at once in a new clone:
# 61.8 and 59.2 CPU-s with that cache, 33.4 and 31.8 without; the installed bytecode also serves
# the modules imported later, compiled once more per clean clone before). This process keeps the
# setting it started with.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_collection_modifyitems(config, items):
    import torch

    _record_pristine_loader_classes()
    group_files(items, longest_first=hasattr(config, "workerinput"))  # in an xdist worker
    if getattr(config.option, "loadgroup", False):  # set in an xdist worker under --dist loadgroup
        name_groups_in_node_ids(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def name_groups_in_node_ids(items: list[pytest.Item]) -> None:
    """Appends each item's ``xdist_group`` to its node id (``...::test_x@group``), which is all
    the controller's scheduler (FileGroups) sees of a group. xdist's worker does this in its own
    collection hook, but it writes ``item._nodeid``, which pytest 9.2 no longer reads (the id is
    ``item._id``, a NodeId), and it runs before the marks above exist: every file was then a unit
    of its own, and files sharing a session fixture ran it once per worker (model_parallel_legs'
    33 legs, the handwritten reference)."""
    from _pytest.nodeid import coerce_node_id

    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None or "@" in item.nodeid.rpartition("]")[2]:
            continue  # not grouped, or named already (an xdist whose own naming took effect)
        tagged = f"{item.nodeid}@{mark.args[0] if mark.args else mark.kwargs.get('name', 'default')}"
        if hasattr(item, "_id"):
            item._id = coerce_node_id(tagged)
        else:  # pytest before 9.2
            item._nodeid = tagged


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # pytest-xdist (-n 2, pyproject's addopts): a test file's tests stay on one worker, so its
    # module fixtures (most launch processes) run once; see helpers/xdist_groups.py.
    return FileGroups(config, log) if config.getvalue("dist") == "loadgroup" else None


# Lightning's _replace_dunder_methods (lightning/fabric/utilities/data.py) wraps DataLoader's and
# BatchSampler's __init__ while a *_dataloader() hook runs, with no `finally`: a hook that raises under
# Lightning (a DataModule's NotImplementedError, a refused loader) leaves them wrapped, and every later
# Lightning run in that worker wraps them again, until a test sharing the worker fails with a
# RecursionError (tests/trainer/test_states.py after test_data_source_datamodule.py). Undone after each test.
_LOADER_METHODS = ("__init__", "__setattr__", "__delattr__")
_PRISTINE_LOADER_CLASSES: dict[type, dict] = {}


def _record_pristine_loader_classes() -> None:
    """The classes' own methods, recorded once tests are collected, before any runs (collection
    runs no Lightning hook)."""
    import torch.utils.data

    for cls in (torch.utils.data.DataLoader, torch.utils.data.BatchSampler):
        methods = {name: cls.__dict__[name] for name in _LOADER_METHODS if name in cls.__dict__}
        _PRISTINE_LOADER_CLASSES.setdefault(cls, methods)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    # No automatic collection while the test modules import torch, Lightning, Keras ...: each full
    # one scanned everything imported so far (the whole suite's collection: 32 of them, 3.5 of a
    # worker's 15.9 CPU-s). Imports make little garbage; pytest_collection_finish collects it once,
    # then freezes what is left.
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_WORKING_DIRECTORY: list[str] = []  # (the folder the tests run in, the one pytest started in)


def pytest_collection_finish(session):
    """Each pytest process runs its tests in a folder of its own (after collecting, which reads paths
    as given). A Trainer given no default_root_dir writes checkpoints/ (and lightning_logs/) into the
    working directory, Lightning's as trainmesh's; the suite's two workers writing the same names
    there at once raced (a checkpoint's atomic rename of epoch=0-step=3-v5.ckpt failed with
    FileNotFoundError in a full run). A hook, not a session fixture: a fixture every file used would
    put every file in one xdist group (helpers/xdist_groups.py)."""
    _WORKING_DIRECTORY[:] = [tempfile.mkdtemp(prefix="trainmesh-tests-"), os.getcwd()]
    os.chdir(_WORKING_DIRECTORY[0])
    # What collection imported (torch, Lightning, Keras, trainmesh, the test modules: about 440,000
    # objects) out of the collector's reach for the rest of the session: each full collection
    # (automatic as the heap grows, or a program's gc.collect()) scanned it all, 0.26-0.30 CPU-s
    # each (test_keras_api.py: 16 of them, 2.1 of its 15.8 CPU-s). Collected first, so that no
    # garbage of collection's is kept; nothing a test makes is frozen.
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session):
    if _WORKING_DIRECTORY:
        folder, before = _WORKING_DIRECTORY
        os.chdir(before)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _lightning_loader_patches_undone():
    yield
    for cls, methods in _PRISTINE_LOADER_CLASSES.items():
        if not any(f"__old{name}" in cls.__dict__ for name in _LOADER_METHODS):
            continue
        for name in _LOADER_METHODS:
            if f"__old{name}" in cls.__dict__:
                delattr(cls, f"__old{name}")
            if name in methods:
                setattr(cls, name, methods[name])
            elif name in cls.__dict__:
                delattr(cls, name)


_GOVERNING_LOGGERS = ("lightning", "lightning.pytorch", "pytorch_lightning", "trainmesh")
# (made once: built per logger, for the ~370 loggers of a worker, it was most of this fixture's
# 0.45 ms a test; 0.09 ms now, the same loggers)
_THEIR_CHILDREN = tuple(f"{name}." for name in _GOVERNING_LOGGERS)


def _logger_settings() -> dict[str, tuple]:
    loggers = [logging.getLogger(name) for name in _GOVERNING_LOGGERS]
    loggers += [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.startswith(_THEIR_CHILDREN) and isinstance(logger, logging.Logger)
    ]
    return {logger.name: (logger.level, logger.propagate, logger.disabled, list(logger.handlers)) for logger in loggers}


@pytest.fixture(autouse=True)
def _lightning_logger_settings_restored():
    # trainmesh's info lines follow the levels a program sets on Lightning's loggers
    # (utilities/lightning_loggers.py), and many tests quiet Lightning with
    # getLogger("lightning.pytorch").setLevel(ERROR): each test leaves those loggers as it found them,
    # or a later test in the same worker would see no trainmesh line at all.
    before = _logger_settings()
    yield
    for name, (level, propagate, disabled, handlers) in before.items():
        logger = logging.getLogger(name)
        logger.propagate, logger.disabled, logger.handlers[:] = propagate, disabled, handlers
        logger.setLevel(level)  # (setLevel also clears logging's cached effective levels)


@pytest.fixture(autouse=True)
def _quiet_threads(monkeypatch):
    # Two cores: keep torch from oversubscribing when tests start subprocesses.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    yield


@pytest.fixture(autouse=True)
def _lightning_seed_variables():
    # Lightning's seed_everything writes PL_GLOBAL_SEED (and PL_SEED_WORKERS) into this process's
    # environment, and a later seed_everything(None) or sampler, trainmesh's or Lightning's, reads it,
    # in this process and in the processes it starts: each test starts, and leaves the next test and
    # the next file's launches, without them (as a shell that never set them; a test that needs one
    # sets it).
    _reset_seed_variables()
    yield
    _reset_seed_variables()


@pytest.fixture(scope="module", autouse=True)
def _lightning_seed_variables_for_the_file():
    # ... and before a file's module fixtures launch their processes
    _reset_seed_variables()
    yield


def _reset_seed_variables():
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        os.environ.pop(name, None)
    # trainmesh's seed_everything(None) takes the process's last seed where Lightning's reads the
    # variable it wrote: not across tests, as the variable (the settings a Runtime reads stay)
    seed_module = sys.modules.get("trainmesh.seed")
    if seed_module is not None:
        seed_module._env_at_last_seed = "(cleared between tests)"


_reset_seed_variables()  # the shell's too: the suite does not depend on where it is run


@pytest.fixture(scope="module", autouse=True)
def _no_process_group_from_another_file():
    # A Trainer run in this process (strategy="ddp", devices=1) keeps its one-process group until
    # exit. Under pytest-xdist the files a worker runs, and their order, change from run to run, so
    # each file starts as it would alone: without a group another file left.
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() == 1:
        dist.destroy_process_group()
    yield
