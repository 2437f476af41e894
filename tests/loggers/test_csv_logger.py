import csv
import os

import numpy as np
import pytest
import torch
import yaml

from trainmesh.loggers.csv_logger import CSVLogger, next_version


def read_rows(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def test_columns_widen_and_values_read_back(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.log_metrics({"loss": 0.25, "val_acc": torch.tensor(0.75)}, step=1)
    logger.log_metrics({"lr": np.float32(0.125)}, step=2)
    logger.finalize("success")

    header, rows = read_rows(logger.metrics_file)
    assert set(header) == {"loss", "val_acc", "lr", "step"}
    assert len(header) == 4
    assert [row["step"] for row in rows] == ["0", "1", "2"]
    assert float(rows[0]["loss"]) == 0.5 and rows[0]["val_acc"] == "" and rows[0]["lr"] == ""
    assert float(rows[1]["val_acc"]) == 0.75
    assert float(rows[2]["lr"]) == 0.125 and rows[2]["loss"] == ""


def test_rows_are_buffered_until_flush_interval_or_save(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=3)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_metrics({"loss": 2.0}, step=1)
    assert not os.path.exists(logger.metrics_file)
    logger.log_metrics({"loss": 3.0}, step=2)  # third call: flushed
    assert len(read_rows(logger.metrics_file)[1]) == 3
    logger.log_metrics({"loss": 4.0, "acc": 1.0}, step=3)
    assert len(read_rows(logger.metrics_file)[1]) == 3
    logger.save()
    header, rows = read_rows(logger.metrics_file)
    assert "acc" in header
    assert [float(r["loss"]) for r in rows] == [1.0, 2.0, 3.0, 4.0]


def test_no_directory_before_first_write(tmp_path):
    logger = CSVLogger(tmp_path / "runs")
    assert logger.log_dir == str(tmp_path / "runs" / "lightning_logs" / "version_0")
    logger.log_metrics({"loss": 1.0}, step=0)
    assert not (tmp_path / "runs").exists()
    logger.finalize("success")
    assert os.path.isfile(logger.metrics_file)


def test_versions_increment(tmp_path):
    first = CSVLogger(tmp_path, name="exp")
    first.log_hyperparams({"lr": 0.1})
    second = CSVLogger(tmp_path, name="exp")
    second.log_hyperparams({"lr": 0.2})
    assert (first.version, second.version) == (0, 1)
    assert second.log_dir.endswith(os.path.join("exp", "version_1"))
    (tmp_path / "exp" / "version_7").mkdir()
    (tmp_path / "exp" / "not_a_version").mkdir()
    assert next_version(tmp_path / "exp") == 8
    # the version is resolved once: creating folders later does not move this run
    assert CSVLogger(tmp_path, name="other").version == 0


def test_explicit_version(tmp_path):
    assert CSVLogger(tmp_path, version=5).log_dir == str(tmp_path / "lightning_logs" / "version_5")
    assert CSVLogger(tmp_path, version="ablation").log_dir == str(tmp_path / "lightning_logs" / "ablation")


def test_a_logger_of_an_existing_version_starts_its_metrics_file_anew(tmp_path):
    """As Lightning's (tests/loggers/test_csv_logger_existing_version.py compares): the earlier
    run's metrics.csv is deleted, with a warning, when the new logger is first used."""
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"loss": 1.0}, step=0)
    first.finalize("success")
    again = CSVLogger(tmp_path, version=0)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        again.log_metrics({"loss": 0.5, "acc": 0.9}, step=1)
    again.finalize("success")
    header, rows = read_rows(again.metrics_file)
    assert set(header) == {"loss", "acc", "step"}
    assert [r["step"] for r in rows] == ["1"]


def test_hparams_yaml(tmp_path):
    """Each value as Lightning's ``save_hparams_to_yaml`` writes it: ``yaml.dump``, Python tags and all
    (tests/loggers/test_csv_logger_hparams_yaml.py compares the text with Lightning's)."""
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.01, "layers": (64, 32), "act": torch.nn.ReLU(), "out": tmp_path})
    logger.log_hyperparams({"batch_size": 32, "scale": torch.tensor(2.0), "nested": {"a": {1, 2}}})
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as file:
        loaded = yaml.unsafe_load(file)
    assert isinstance(loaded.pop("act"), torch.nn.ReLU) and torch.equal(loaded.pop("scale"), torch.tensor(2.0))
    assert loaded == {"lr": 0.01, "layers": (64, 32), "out": tmp_path, "batch_size": 32, "nested": {"a": {1, 2}}}


def test_bad_metrics_and_arguments(tmp_path):
    logger = CSVLogger(tmp_path)
    with pytest.raises(ValueError, match="shape"):
        logger.log_metrics({"loss": torch.ones(3)}, step=0)
    with pytest.raises(ValueError, match="not a number"):
        logger.log_metrics({"name": "abc"}, step=0)
    with pytest.raises(ValueError, match="flush_logs_every_n_steps"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=0)


def test_the_header_is_sorted_as_lightning_s(tmp_path):
    """metrics.csv's columns in Lightning 2.6's order (sorted again whenever a name is new), for the same
    log_metrics calls and flushes: the file's text equals Lightning's. Before, trainmesh kept the order
    names first came in (as pytorch-lightning 1.9.5 did)."""
    lightning_loggers = pytest.importorskip("lightning.pytorch.loggers")
    calls = [({"val_loss": 2.5, "val_acc": 0.0625, "epoch": 0}, 4), ({"val_loss": 2.25, "epoch": 1}, 9)]
    calls += [({"test_loss": 2.0, "test_acc": 0.09375, "epoch": 2}, 10), ({"b_first": 1.0, "epoch": 2}, 11)]
    texts = []
    for make in (lightning_loggers.CSVLogger, CSVLogger):
        logger = make(tmp_path / make.__module__, name="run", flush_logs_every_n_steps=2)
        for metrics, step in calls:
            logger.log_metrics(metrics, step=step)
        logger.finalize("success")
        with open(os.path.join(logger.log_dir, "metrics.csv")) as file:
            texts.append(file.read())
    assert texts[0].splitlines()[0] == "b_first,epoch,step,test_acc,test_loss,val_acc,val_loss"
    assert texts[1] == texts[0]


@pytest.mark.parametrize("name", ["", None])
@pytest.mark.parametrize("framework", ["lightning", "trainmesh"])
def test_log_hyperparams_without_params_writes_an_empty_hparams_yaml_as_lightning(tmp_path, framework, name):
    """Lightning's ``CSVLogger.log_hyperparams(params=None)`` (its test_csv.py::test_no_name); before,
    trainmesh's required ``params`` (TypeError), and ``name=None`` stopped in os.path.join (TypeError)."""
    if framework == "lightning":
        loggers = pytest.importorskip("lightning.pytorch.loggers")
        logger = loggers.CSVLogger(tmp_path, name=name)
    else:
        logger = CSVLogger(tmp_path, name=name)
    assert logger.name == "" and os.path.normpath(logger.root_dir) == str(tmp_path)
    logger.log_hyperparams()
    logger.save()
    assert os.listdir(tmp_path / "version_0") == ["hparams.yaml"]
    assert yaml.safe_load((tmp_path / "version_0" / "hparams.yaml").read_text()) == {}
