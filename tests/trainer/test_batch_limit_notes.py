"""``Trainer()``'s info lines for the debugging flags, as Lightning 2.6 logs them (the ViT tutorial's
``limit_val_batches=1`` / ``limit_test_batches=1`` printed "`Trainer(limit_val_batches=1)` was
configured so 1 batch will be used." under Lightning only)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("lightning.pytorch")

CASES = [
    {},
    {"limit_val_batches": 1, "limit_test_batches": 1},
    {"limit_train_batches": 1, "limit_val_batches": 1.0, "limit_predict_batches": 1.0, "val_check_interval": 1},
    {"limit_train_batches": 1.0, "val_check_interval": 1.0, "limit_test_batches": 2},
    {"overfit_batches": 1, "limit_train_batches": 1, "limit_val_batches": 1, "limit_test_batches": 1},
    {"overfit_batches": 1.0},
    {"fast_dev_run": True, "limit_test_batches": 1},
    {"fast_dev_run": 3},
]


def _said(pl, caplog, tmp_path, settings):
    caplog.clear()
    pl.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False, **settings)
    return [
        r.getMessage()
        for r in caplog.records
        if "was configured so" in r.getMessage() or "fast_dev_run" in r.getMessage()
    ]


@pytest.mark.parametrize("settings", CASES, ids=[str(c) for c in CASES])
def test_the_lines_are_lightning_s(settings, caplog, tmp_path):
    import lightning.pytorch as lightning

    import trainmesh

    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    caplog.set_level(logging.INFO, logger="trainmesh")
    expected = _said(lightning, caplog, tmp_path, settings)
    assert _said(trainmesh, caplog, tmp_path, settings) == expected
    if settings == CASES[1]:
        assert "`Trainer(limit_val_batches=1)` was configured so 1 batch will be used." in expected
