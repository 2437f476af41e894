from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.batches import Batches, LegFailed

HERE = Path(__file__).parent

# The test files of each program of keras_batch.py.
PROGRAM_FILES = {
    "keras_run": ("test_keras_ddp.py",),
    "keras_callbacks_run": ("test_keras_callbacks_ddp.py",),
    "keras_zero1_run": ("test_keras_zero1.py",),
    "keras_unseen_programs": ("test_keras_unseen_programs.py",),
    "keras_random_programs": ("test_keras_random_draws.py",),
    "keras_batch_metric_programs": ("test_batch_metrics.py", "test_routes.py"),
    "keras_masked_programs": ("test_masked_losses.py",),
}


@pytest.fixture(scope="session")
def keras_ddp_programs(request, tmp_path_factory) -> Callable[[str], Path]:
    """``folder = keras_ddp_programs(NAME)``: the folder the ddp run of program NAME (keras_run,
    keras_callbacks_run, keras_zero1_run, keras_unseen_programs) wrote, each rank its files, as when it runs alone. The programs
    of the test files this session runs are legs of one launch of 2 processes (keras_batch.py), which
    runs on first use: one agent importing Keras, and its 2 workers forks of it (ddp_fork) instead
    of new interpreters importing torch, trainmesh and Keras again, per program."""
    root = tmp_path_factory.mktemp("keras_ddp_programs")
    collected = {item.path.name for item in request.session.items}
    plan = []
    for name, test_files in PROGRAM_FILES.items():
        if collected.intersection(test_files):  # a file run alone launches its own program only
            (root / name).mkdir()
            plan.append((name, 2, [name, str(root / name)], {}))
    batches = Batches(HERE / "keras_batch.py", root, plan, leg_timeout=400, cwd=HERE, forked=True, fork_workers=True)

    def folder(name: str) -> Path:
        try:
            batches(name)
        except LegFailed as failed:
            pytest.fail(str(failed), pytrace=False)
        return root / name

    return folder
