"""``import trainmesh`` stays light: heavy and optional dependencies are imported where they are
used (benchmarks/import_time.py measures the time; this checks what gets imported)."""

import json
import os
import subprocess
import sys

import pytest

HEAVY_OR_OPTIONAL = ("torch.distributed.tensor", "sympy", "keras", "tensorboard", "sklearn", "rich", "jsonargparse")


@pytest.fixture(scope="module")
def modules_after_import() -> set[str]:
    # A fresh interpreter: this one has imported whatever other tests needed.
    code = "import sys, json, trainmesh; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=True,
    )
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("module", HEAVY_OR_OPTIONAL)
def test_import_trainmesh_does_not_import(module, modules_after_import):
    assert module not in modules_after_import, f"import trainmesh imports {module}; import it where it is used"
