"""A ``CSVLogger`` given the version of an earlier run, under Lightning 2.6 and trainmesh: Lightning's
warns that the folder exists and is not empty and deletes the earlier ``metrics.csv`` when the logger
is first used (its ExperimentWriter's creation), so the file holds the new run's rows only; a second
use of the same logger appends (its writer is made once)."""

from __future__ import annotations

import csv
import warnings

import pytest

from helpers.programs import port

pytest.importorskip("lightning.pytorch")


def _rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _run(name, root):
    loggers = port(name).loggers
    first = loggers.CSVLogger(root, version=0)
    first.log_hyperparams({"lr": 0.1})
    first.log_metrics({"loss": 1.0}, step=0)
    first.save()
    again = loggers.CSVLogger(root, version=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.log_metrics({"loss": 0.5, "acc": 0.9}, step=1)
        again.save()
        again.log_metrics({"loss": 0.25}, step=2)
        again.save()
    said = [str(w.message).replace(str(root), "ROOT") for w in caught]
    files = sorted(p.name for p in (root / "lightning_logs" / "version_0").iterdir())
    return {"rows": _rows(again.log_dir + "/metrics.csv"), "said": said, "files": files}


def test_an_existing_version_s_metrics_file_is_replaced_as_lightnings(tmp_path):
    theirs, ours = _run("lightning", tmp_path / "lightning"), _run("trainmesh", tmp_path / "trainmesh")
    assert [row["step"] for row in theirs["rows"]] == ["1", "2"]  # the reference: the old row is gone
    assert ours == theirs
