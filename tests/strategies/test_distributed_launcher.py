"""``trainer.strategy.launcher`` and ``trainer.strategy._layer_sync`` under Lightning 2.6.6's process-starting
strategies, read on the constructed Trainer (no process started): a launcher whose
``is_interactive_compatible`` is True only for forked workers (ddp: Lightning's
``_SubprocessScriptLauncher``; ddp_spawn, ddp_fork: its ``_MultiProcessingLauncher``), and no layer sync
without ``sync_batchnorm``. Before: AttributeError on both."""

from __future__ import annotations

import pytest

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _read(package, strategy: str) -> tuple[bool, bool, object]:
    trainer = package.Trainer(accelerator="cpu", strategy=strategy, devices=2, logger=False)
    launcher = trainer.strategy.launcher
    return launcher is not None, launcher.is_interactive_compatible, trainer.strategy._layer_sync


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork"])
def test_launcher_and_layer_sync_as_lightning(strategy):
    assert _read(trainmesh, strategy) == _read(pl, strategy)
