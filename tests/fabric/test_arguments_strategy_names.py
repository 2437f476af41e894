"""Fabric's constructor flags as trainmesh.fabric.arguments reads them, beside Lightning Fabric 2.6's connector."""

from __future__ import annotations

import pytest

from trainmesh.fabric.arguments import fabric_strategy

connector = pytest.importorskip("lightning.fabric.connector")


@pytest.mark.parametrize("name", ["DDP", "Ddp_Spawn", "DDP_Find_Unused_Parameters_True"])
def test_a_strategy_name_is_read_in_lower_case_as_lightning_fabric_reads_it(name):
    theirs = connector._Connector(accelerator="cpu", devices=1, strategy=name)._strategy_flag
    assert fabric_strategy(name, "cpu") == theirs == name.lower()
