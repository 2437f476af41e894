"""A logger used before ``fit`` under ``strategy="ddp"`` started as ``python train.py``: the run's files
land in the folder it took, as Lightning's (launchers/agent_versions.py).

Lightning's first process is rank 0: ``trainer.logger.log_hyperparams(...)`` before ``fit`` takes
``version_0`` and the run's metrics go there. trainmesh's first process becomes the elastic agent
and rank 0's worker runs the script again: before, its logger found ``version_0`` taken by the agent
and the run went to ``version_1`` (found in /work/progs/l-ddp-progs6 i3: Lightning 2.6.6 wrote
``logs/version_0/{hparams.yaml,metrics.csv}``, trainmesh ``version_0/hparams.yaml`` and
``version_1/{hparams.yaml,metrics.csv}``). Here the agent and its worker are played in one process:
the agent's loggers, what ``ElasticLauncher.launch`` hands on, then a worker's fresh module state
and the variables torch's agent and trainmesh's set for it.
"""

from __future__ import annotations

import os
import warnings

import pytest

from trainmesh.launchers import agent_versions
from trainmesh.launchers.agent_link import AGENT_VARIABLE
from trainmesh.loggers import CSVLogger, TensorBoardLogger

pytest.importorskip("lightning.pytorch")


def _script(logger_classes, root):
    """The script's loggers up to fit (hyperparameters logged before it), then a second run's logger."""
    csv, tensorboard = logger_classes
    before_fit = [csv(root, name="logs"), tensorboard(root, name="tb")]
    for logger in before_fit:
        logger.log_hyperparams({"lr": 0.1})
    return before_fit


def _fresh_process(monkeypatch):
    monkeypatch.setattr(agent_versions, "_taken", {})
    monkeypatch.setattr(agent_versions, "_handed", None)
    monkeypatch.setattr(agent_versions, "_from_agent", set())


def test_rank_zero_writes_into_the_folders_the_agent_s_loggers_took_before_fit(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import CSVLogger as TheirCSVLogger
    from lightning.pytorch.loggers import TensorBoardLogger as TheirTensorBoardLogger

    theirs = _script((TheirCSVLogger, TheirTensorBoardLogger), tmp_path / "lightning")  # rank 0 goes on to fit
    monkeypatch.setenv(agent_versions.VERSIONS_VARIABLE, "")  # restored after the test
    _fresh_process(monkeypatch)
    _script((CSVLogger, TensorBoardLogger), tmp_path / "trainmesh")  # the agent, up to fit
    agent_versions.hand_versions_to_workers()
    _fresh_process(monkeypatch)  # rank 0's worker, started by that agent
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "trainmesh-test")
    monkeypatch.setenv(AGENT_VARIABLE, f"{os.getppid()} trainmesh-test")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the folder holds this run's files: no "exists and is not empty"
        ours = _script((CSVLogger, TensorBoardLogger), tmp_path / "trainmesh")
    for run in (theirs, ours):  # the fit's metrics, then a logger made after fit: the next version
        for logger in run:
            logger.log_metrics({"loss": 1.0}, step=0)
            logger.save()
    assert [logger.version for logger in ours] == [logger.version for logger in theirs] == [0, 0]
    after_fit = CSVLogger(tmp_path / "trainmesh", name="logs").version
    assert after_fit == TheirCSVLogger(tmp_path / "lightning", name="logs").version == 1
    for name in ("logs", "tb"):
        assert sorted(os.listdir(tmp_path / "trainmesh" / name)) == sorted(os.listdir(tmp_path / "lightning" / name))
    assert sorted(os.listdir(tmp_path / "trainmesh" / "logs" / "version_0")) == ["hparams.yaml", "metrics.csv"]


def test_a_process_no_agent_of_ours_started_takes_the_next_free_version(tmp_path, monkeypatch):
    """torchrun's workers (or a variable left in the environment) hand nothing on."""
    _fresh_process(monkeypatch)
    monkeypatch.setenv(agent_versions.VERSIONS_VARIABLE, f'{{"{tmp_path / "logs"}": [0]}}')
    monkeypatch.delenv(AGENT_VARIABLE, raising=False)
    CSVLogger(tmp_path, name="logs").log_hyperparams({"lr": 0.1})
    assert CSVLogger(tmp_path, name="logs").version == 1
