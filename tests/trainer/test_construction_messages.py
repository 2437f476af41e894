"""What ``Trainer(...)`` logs as it ends, as Lightning 2.6's: the device lines, then for ``fast_dev_run``
its ``Running in `fast_dev_run` mode: ...`` line (its ``_init_debugging_flags``)."""

from __future__ import annotations

import logging
import re

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


def test_a_given_model_summary_is_said_as_lightning_says_it(caplog) -> None:
    """``Trainer(callbacks=[ModelSummary(max_depth=2)])``: Lightning logs that it adds no default summary
    (the class named by its own module; trainmesh names its own)."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    caplog.set_level(logging.INFO)
    said = []
    for framework in (lightning, trainmesh):
        caplog.clear()
        framework.Trainer(accelerator="cpu", callbacks=[framework.callbacks.ModelSummary(max_depth=2)], logger=False)
        lines = [r.getMessage() for r in caplog.records if "model summary callbacks" in r.getMessage()]
        said.append([re.sub(r"<class '[\w.]+\.(\w+)'>", r"\1", line) for line in lines])
    assert (
        said[1]
        == said[0]
        == [
            "Trainer already configured with model summary callbacks: [ModelSummary]. "
            "Skipping setting a default `ModelSummary` callback."
        ]
    )
