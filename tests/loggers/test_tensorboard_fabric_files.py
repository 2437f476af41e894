"""Fabric's TensorBoard logger (``lightning.fabric.loggers.TensorBoardLogger``) beside Lightning Fabric 2.6's: the
files its folder holds after a run that logs, saves and finalizes: the event file only. trainmesh's wrote the
Trainer side's ``hparams.yaml`` there too (found running the Fabric docs' logging guide with two loggers)."""

from __future__ import annotations

import pytest

pytest.importorskip("lightning.fabric")
pytest.importorskip("tensorboard")


def _files(logger_class, root) -> list[str]:
    logger = logger_class(root_dir=root)
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.log_hyperparams({"lr": 0.1})
    logger.save()
    logger.finalize("success")
    return sorted(path.name.split(".")[0] for path in (root / "lightning_logs" / "version_0").iterdir())


def test_fabric_s_tensorboard_folder_holds_the_event_file_only(tmp_path):
    from lightning.fabric.loggers import TensorBoardLogger as Theirs

    from trainmesh.fabric.loggers import TensorBoardLogger as Ours

    assert _files(Ours, tmp_path / "ours") == _files(Theirs, tmp_path / "theirs") == ["events"]
