"""The suite's own xdist grouping (tests/conftest.py, helpers/xdist_groups.py), run for real: two
files sharing a session fixture go to one worker under ``-n 2``, so the fixture runs once (the
model-parallel legs, the handwritten reference: minutes of launches when run once per worker)."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent

# The root's conftest has the suite's hooks, loaded from tests/conftest.py (under another module
# name than its own), which pytest's own process loads before it starts the workers, as the
# suite's. The session fixture is defined in a folder below the root: the grouping counts
# fixtures of the project's conftests, not the root's or a plugin's.
ROOT_CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_collection_modifyitems = suite.pytest_collection_modifyitems
pytest_xdist_make_scheduler = suite.pytest_xdist_make_scheduler
"""
CONFTEST = """
import os, sys, pytest

@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    with open(os.environ["RECORD"], "a") as record:
        record.write("fixture\\n")
        record.write(f"bytecode {sys.flags.dont_write_bytecode} {sys.pycache_prefix}\\n")

@pytest.fixture(autouse=True)
def where(request):
    with open(os.environ["RECORD"], "a") as record:
        record.write(f"{os.environ['PYTEST_XDIST_WORKER']} {request.node.nodeid}\\n")
"""
TEST = """
def test_one(shared):
    pass

def test_two(shared):
    pass
"""


def test_files_sharing_a_session_fixture_run_on_one_worker_and_run_it_once(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(ROOT_CONFTEST)
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    for name in ("test_a.py", "test_b.py"):
        (project / name).write_text(TEST)
    record = tmp_path / "record.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH", "PYTHONPYCACHEPREFIX"))}
    # Bytecode off, as on the project's machines: the suite's conftest turns it on for the workers.
    env.update(RECORD=str(record), PYTHONPATH=str(TESTS), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = record.read_text().split("\n")[:-1]
    assert lines.count("fixture") == 1, lines
    # The workers (and what they start) write bytecode beside the sources and read what pip
    # installed: a cache of their own (PYTHONPYCACHEPREFIX) hid it, and a clean clone's new venv
    # had torch, Lightning and Keras compiled again (two workers' collection: 61.8 CPU-s, 33.4 now).
    assert [line for line in lines if line.startswith("bytecode")] == ["bytecode 0 None"], lines
    ran = [line.split(" ", 1) for line in lines if line != "fixture" and not line.startswith("bytecode")]
    assert len(ran) == 4 and len({worker for worker, _ in ran}) == 1, ran
    # The group's name in each node id, as FileGroups reads it (named after its first file).
    assert all(nodeid.endswith("@project/test_a.py") for _, nodeid in ran), ran
