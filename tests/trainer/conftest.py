from pathlib import Path

import pytest

from helpers.beside_lightning import run_beside_lightning


@pytest.fixture(scope="session")
def lightning_ddp(tmp_path_factory) -> Path:
    """Five ddp programs' records, ``<folder>/<framework>/<program>/``: one launch per framework
    (lightning_ddp_run.py; helpers/beside_lightning.py: each framework on 2 forks in one process
    group, Lightning's Trainer finding its processes started, as under torchrun), shared by
    test_evaluation_shares.py, test_lightning_sampler_ddp.py, test_precision_flag.py,
    test_differential_programs_more.py and test_lightning_members_ddp.py (one xdist unit,
    helpers/xdist_groups.py)."""
    pytest.importorskip("lightning.pytorch")
    out = tmp_path_factory.mktemp("lightning_ddp")
    run_beside_lightning(Path(__file__).resolve().parent / "lightning_ddp_run.py", out, lightning_starts=False)
    return out
