"""Lightning's progress-bar and summary names: templates that pass them run, and the passed one
replaces the default (a run never draws two bars or prints two summaries)."""

import pytest

import trainmesh as tm
from trainmesh.callbacks import (
    ModelSummary,
    ProgressBar,
    RichModelSummary,
    RichProgressBar,
    TQDMProgressBar,
)


def _only(trainer: tm.Trainer, cls: type) -> object:
    found = [cb for cb in trainer.callbacks if isinstance(cb, cls)]
    assert len(found) == 1, trainer.callbacks
    return found[0]


@pytest.mark.parametrize(
    "bar",
    [
        RichProgressBar(refresh_rate=5, leave=False, theme={"progress_bar": "green"}),
        TQDMProgressBar(refresh_rate=5, process_position=0, leave=False),
    ],
)
def test_lightning_progress_bar_names_replace_the_default(bar, tmp_path):
    summary = RichModelSummary(max_depth=2)
    trainer = tm.Trainer(callbacks=[bar, summary], default_root_dir=tmp_path, logger=False, enable_checkpointing=False)
    assert _only(trainer, ProgressBar) is bar and bar.refresh_rate == 5 and bar.leave is False
    assert _only(trainer, ModelSummary) is summary and summary.max_depth == 2


def test_lightning_s_callback_module_paths_import():
    """``from lightning.pytorch.callbacks.callback import Callback`` and ``...throughput_monitor import
    ThroughputMonitor`` (paths Lightning 2.6 has; its own tests import them) port to trainmesh's classes."""
    lightning = pytest.importorskip("lightning.pytorch.callbacks.callback")
    assert lightning.Callback.__name__ == "Callback"
    from trainmesh.callbacks import Callback, ThroughputMonitor
    from trainmesh.callbacks.callback import Callback as CallbackByPath
    from trainmesh.callbacks.throughput_monitor import ThroughputMonitor as MonitorByPath

    assert CallbackByPath is Callback and MonitorByPath is ThroughputMonitor
