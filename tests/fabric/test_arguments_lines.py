"""What Fabric's constructor says, beside Lightning Fabric 2.6's: the same lines, once per run.

Fabric says its precision warnings and the AMP banner with rank_zero_warn / rank_zero_info, so
under ddp only rank 0 (the process the user started) says them. trainmesh's agent process said them
when it built the Fabric, before ``launch()`` ran the script again: its workers say nothing, nor
"Seed set to N" for a seed set before ``launch()`` on rank 0 (the agent process said it). Nothing
is said about more CPU processes than cores (the Trainer's warning of issue 12; Fabric has none).
"""

from __future__ import annotations

import logging
import warnings

import pytest

from trainmesh import Fabric
from trainmesh.accelerators import physical_cpu_count
from trainmesh.fabric.arguments import fabric_strategy
from trainmesh.launchers.agent_link import AGENT_VARIABLE
from trainmesh.seed import seed_everything

lightning_fabric = pytest.importorskip("lightning.fabric")
rank_zero_only = pytest.importorskip("lightning_utilities.core.rank_zero").rank_zero_only


def _said(caplog, build) -> tuple[list[str], list[str]]:
    """The warnings' messages and the lines logged."""
    caplog.clear()
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    return [str(w.message) for w in caught], [record.getMessage() for record in caplog.records]


def _lightning() -> None:
    lightning_fabric.Fabric(accelerator="cpu", devices=1, precision="16")


def _trainmesh() -> None:
    Fabric(accelerator="cpu", devices=1, precision="16")


@pytest.mark.parametrize("rank", [0, 1])
def test_the_constructor_s_lines_are_said_on_rank_zero_as_lightning_fabric_says_them(caplog, monkeypatch, rank):
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", AGENT_VARIABLE, "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rank_zero_only, "rank", rank)
    monkeypatch.setenv("RANK", str(rank))
    theirs = _said(caplog, _lightning)
    ours = _said(caplog, _trainmesh)
    assert ours == theirs
    assert [len(said) for said in theirs] == ([2, 1] if rank == 0 else [0, 0])


@pytest.mark.parametrize("rank", [0, 1])
def test_a_worker_of_trainmesh_s_agent_says_nothing_its_agent_process_said(caplog, monkeypatch, rank):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv(AGENT_VARIABLE, "1 run")
    assert _said(caplog, _trainmesh) == ([], [])
    assert _said(caplog, lambda: fabric_strategy("dp", "cpu")) == ([], [])
    # a seed set before launch(): the agent process said "Seed set to 3" as Fabric's rank 0; rank 1 says its own
    theirs = _said(caplog, lambda: lightning_fabric.seed_everything(3))
    ours = _said(caplog, lambda: seed_everything(3))
    assert ours == (theirs if rank == 1 else ([], []))
    assert theirs == ([], [f"[rank: {rank}] Seed set to 3"])


def test_more_cpu_processes_than_physical_cores_are_set_up_without_a_word(caplog):
    # physical + 1 is within 4x the logical cores on any machine; nothing starts before launch()
    devices = physical_cpu_count() + 1
    theirs = _said(caplog, lambda: lightning_fabric.Fabric(accelerator="cpu", devices=devices, strategy="ddp"))
    ours = _said(caplog, lambda: Fabric(accelerator="cpu", devices=devices, strategy="ddp"))
    assert ours == theirs == ([], [])
