"""What ``Trainer(...)`` logs as it ends, as Lightning 2.6's: the device lines, then for ``fast_dev_run``
its ``Running in `fast_dev_run` mode: ...`` line (its ``_init_debugging_flags``)."""

from __future__ import annotations

import logging

import pytest


def _lines(framework, caplog, fast_dev_run) -> list[str]:
    caplog.clear()
    framework.Trainer(accelerator="cpu", fast_dev_run=fast_dev_run, enable_progress_bar=False)
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "litlogger" not in r.getMessage()]


@pytest.mark.parametrize("fast_dev_run", [False, True, 3])
def test_trainer_logs_lightning_s_lines_for_fast_dev_run(caplog, fast_dev_run) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    caplog.set_level(logging.INFO)
    expected = _lines(lightning, caplog, fast_dev_run)
    assert any(line.startswith("Running in `fast_dev_run` mode") for line in expected) == bool(fast_dev_run)
    assert _lines(trainmesh, caplog, fast_dev_run) == expected
