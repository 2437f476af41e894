import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from legs import SCRIPT, run, weights  # noqa: E402


@pytest.fixture(scope="session")
def handwritten(tmp_path_factory) -> dict[str, torch.Tensor]:
    """The keras-io seed's hand-written 2-process DDP loop: batch 16 per rank, Adam, 2 epochs."""
    out = tmp_path_factory.mktemp("ref") / "handwritten.pt"
    result = run(str(SCRIPT), "handwritten", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    return weights(out)
