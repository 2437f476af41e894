"""Lightning 2.6's ``DDPStrategy(start_method=...)`` names: "popen", "spawn", "fork", "forkserver"
(lightning/pytorch/strategies/ddp.py); each one builds the launcher that starts processes that way."""

from __future__ import annotations

import pytest

from trainmesh.launchers import build_launcher
from trainmesh.strategies import DDPStrategy


@pytest.mark.parametrize(
    ("lightning", "ours"), [("popen", "elastic"), ("spawn", "spawn"), ("fork", "fork"), ("forkserver", "forkserver")]
)
def test_lightning_start_methods_build_their_launcher(lightning: str, ours: str) -> None:
    strategy = DDPStrategy(start_method=lightning)
    assert strategy.start_method == ours
    launcher = build_launcher(strategy.processes.start_method, devices=2, num_nodes=1)
    assert getattr(launcher, "start_method", "elastic") == ours


def test_an_unknown_start_method_names_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match="'forkserver'"):
        DDPStrategy(start_method="threads")
