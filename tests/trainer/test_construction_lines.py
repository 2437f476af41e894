"""What ``Trainer(...)`` says under ddp, beside Lightning 2.6's: the same lines, once per run.

Lightning says its construction lines (the precision warnings, "Using bfloat16 Automatic Mixed
Precision (AMP)", "GPU available: ...", "TPU available: ...") with rank_zero_warn / rank_zero_info:
under ddp only rank 0, the process the user started, says them. trainmesh's agent process said them
when it built the Trainer, before ``fit()`` started the workers: its workers, running the script again,
say nothing of it, nor trainmesh's own warning for more CPU processes than physical cores (issue 12,
said once, by the agent process). The launched ranks are simulated here as in
tests/fabric/test_arguments_lines.py: their environment, one process.
"""

from __future__ import annotations

import logging
import warnings

import pytest

from trainmesh import Trainer
from trainmesh.accelerators import physical_cpu_count
from trainmesh.launchers.agent_link import AGENT_VARIABLE

lightning = pytest.importorskip("lightning.pytorch")
rank_zero_only = pytest.importorskip("lightning_utilities.core.rank_zero").rank_zero_only

_ARGUMENTS = {"accelerator": "cpu", "precision": "16-mixed", "logger": False, "enable_progress_bar": False}


def _said(caplog, build) -> tuple[list[str], list[str]]:
    """The warnings' messages and the lines logged at INFO (Lightning's advertisement left out)."""
    caplog.clear()
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "litlogger" not in r.getMessage()]
    return [str(w.message) for w in caught], lines


def _clear_ranks(monkeypatch) -> None:
    for name in (
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "WORLD_SIZE",
        "SLURM_PROCID",
        AGENT_VARIABLE,
        "TORCHELASTIC_RUN_ID",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("rank", [0, 1])
def test_the_construction_lines_are_said_on_rank_zero_as_lightning_says_them(caplog, monkeypatch, rank):
    _clear_ranks(monkeypatch)
    monkeypatch.setattr(rank_zero_only, "rank", rank)  # Lightning's Trainer sets it from the environment below
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "NODE_RANK": 0, "WORLD_SIZE": 2}.items():
        monkeypatch.setenv(name, str(value))  # as Lightning's launcher starts rank 1
    theirs = _said(caplog, lambda: lightning.Trainer(devices=2, strategy="ddp", **_ARGUMENTS))
    ours = _said(caplog, lambda: Trainer(devices=2, strategy="ddp", **_ARGUMENTS))
    assert ours == theirs
    assert [len(said) for said in theirs] == ([1, 3] if rank == 0 else [0, 0])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_worker_of_trainmesh_s_agent_says_nothing_its_agent_process_said(caplog, monkeypatch, rank):
    _clear_ranks(monkeypatch)
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv(AGENT_VARIABLE, "1 run")
    # physical + 1 processes: the agent process warned of more CPU processes than physical cores
    devices = physical_cpu_count() + 1
    assert _said(caplog, lambda: Trainer(devices=devices, strategy="ddp", **_ARGUMENTS)) == ([], [])
    # the process the user started (no rank in its environment) says its lines and the warning, once
    _clear_ranks(monkeypatch)
    warned, lines = _said(caplog, lambda: Trainer(devices=devices, strategy="ddp", **_ARGUMENTS))
    assert len(lines) == 3 and len(warned) == 2 and any("physical" in message for message in warned)
