"""What a program's output shows, Lightning 2.6.6 beside trainmesh, one process: the info lines go
through the logging module (``caplog`` sees the same lines for the same events, none on stdout),
and a program's settings of Lightning's loggers govern trainmesh's lines as they govern Lightning's."""

from __future__ import annotations

import io
import logging
import types

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh
from trainmesh.utilities import lightning_loggers

pl = pytest.importorskip("lightning.pytorch")

# the events both say: EarlyStopping's and ModelCheckpoint's verbose lines, the fit loop's stop reason
EVENTS = ("Metric ", "Epoch ", "`Trainer.fit` stopped")


def _module_class(framework: types.ModuleType) -> type:
    class Regression(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Regression


def _fit(framework: types.ModuleType, root, *, quiet: bool = True, **trainer_kwargs) -> None:
    """The same program under ``framework`` (``lightning.pytorch`` or ``trainmesh``); prints a line of its own."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    callbacks = [
        framework.callbacks.EarlyStopping("val_loss", patience=1, verbose=True),
        framework.callbacks.ModelCheckpoint(dirpath=str(root), monitor="val_loss", save_top_k=1, verbose=True),
    ]
    quiet_kwargs = dict(enable_progress_bar=False, enable_model_summary=False) if quiet else {}
    trainer = framework.Trainer(
        max_epochs=3, logger=False, callbacks=callbacks, default_root_dir=str(root), **quiet_kwargs, **trainer_kwargs
    )
    model = _module_class(framework)()
    trainer.fit(model, DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
    print("the program's own line")


@pytest.fixture
def logs(caplog, monkeypatch):
    """caplog at INFO for both packages' loggers; both propagate to root (caplog's handler), whatever
    root had when each was imported."""
    for name in ("lightning.pytorch", "trainmesh"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    caplog.set_level(logging.INFO)
    return caplog


@pytest.fixture
def set_level(request):
    """``logging.getLogger(name).setLevel(level)`` for one test (setLevel clears logging's caches)."""

    def set_for_the_test(name: str, level: int) -> None:
        logger = logging.getLogger(name)
        request.addfinalizer(lambda before=logger.level: logger.setLevel(before))
        logger.setLevel(level)

    return set_for_the_test


def _said(caplog, root) -> list[str]:
    lines = [r.getMessage().replace(str(root), "ROOT") for r in caplog.records if r.getMessage().startswith(EVENTS)]
    caplog.clear()
    return lines


def test_the_same_events_log_the_same_lines_and_stdout_holds_only_the_program_s(logs, capsys, tmp_path):
    _fit(pl, tmp_path / "lightning")
    theirs, theirs_out = _said(logs, tmp_path / "lightning"), capsys.readouterr().out
    _fit(trainmesh, tmp_path / "trainmesh")
    ours, ours_out = _said(logs, tmp_path / "trainmesh"), capsys.readouterr().out
    assert theirs[0] == "Metric val_loss improved. New best score: 0.766"  # Lightning 2.6.6's, this program
    assert any("saving model to 'ROOT/epoch=0-step=4.ckpt' as top 1" in line for line in theirs)
    assert theirs[-1] == "`Trainer.fit` stopped: `max_epochs=3` reached."
    assert ours == theirs
    assert ours_out == theirs_out == "the program's own line\n"


def test_with_the_default_bar_and_summary_no_logged_line_reaches_stdout(logs, capsys, tmp_path):
    # rich installed: Lightning's RichProgressBar and RichModelSummary render on stdout, its lines are logged
    _fit(pl, tmp_path / "lightning", quiet=False)
    theirs, theirs_out = [r.getMessage() for r in logs.records], capsys.readouterr().out
    logs.clear()
    _fit(trainmesh, tmp_path / "trainmesh", quiet=False)
    ours, ours_out = [r.getMessage() for r in logs.records], capsys.readouterr().out
    for lines, out in ((theirs, theirs_out), (ours, ours_out)):
        assert "Total params" in out and out.endswith("the program's own line\n")
        assert lines and not [line for line in lines if line.strip() and line.strip() in out]
    assert any(line.startswith("trainmesh fit: strategy single") for line in ours)  # trainmesh's start line


@pytest.mark.parametrize(
    "name, kept",
    [
        ("lightning.pytorch", ()),
        ("lightning.pytorch.callbacks", ("Epoch ", "`Trainer.fit` stopped")),  # EarlyStopping's logger is under it
        ("lightning.pytorch.utilities.rank_zero", ("Metric ",)),  # rank_zero_info's lines; EarlyStopping's stay
        ("lightning", EVENTS),  # Lightning gives lightning.pytorch its own INFO: a parent's level changes nothing
    ],
)
def test_a_level_set_on_lightning_s_loggers_governs_both(logs, tmp_path, set_level, name, kept):
    set_level(name, logging.ERROR)
    _fit(pl, tmp_path / "lightning")
    theirs = _said(logs, tmp_path / "lightning")
    _fit(trainmesh, tmp_path / "trainmesh")
    assert _said(logs, tmp_path / "trainmesh") == theirs
    assert {prefix for prefix in EVENTS if any(line.startswith(prefix) for line in theirs)} == set(kept)


def test_the_older_package_s_name_silences_trainmesh_too(logs, tmp_path, set_level):
    # pytorch_lightning's loggers are that package's: a notebook ported to trainmesh keeps the line
    set_level("pytorch_lightning", logging.WARNING)
    _fit(trainmesh, tmp_path)
    assert [r for r in logs.records if r.name.startswith("trainmesh.")] == []


def test_a_handler_added_to_lightning_s_logger_receives_the_same_lines(logs, tmp_path, monkeypatch):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    monkeypatch.setattr(logging.getLogger("lightning.pytorch"), "handlers", [handler])
    _fit(pl, tmp_path / "lightning")
    theirs = stream.getvalue().replace(str(tmp_path / "lightning"), "ROOT")
    stream.truncate(0), stream.seek(0)
    # in this process lightning.pytorch is Lightning itself, whose handlers the filter leaves to it
    monkeypatch.setattr(lightning_loggers, "_is_lightning_itself", lambda top: False)
    _fit(trainmesh, tmp_path / "trainmesh")
    ours = stream.getvalue().replace(str(tmp_path / "trainmesh"), "ROOT")
    assert "`Trainer.fit` stopped: `max_epochs=3` reached.\n" in theirs
    assert [line for line in ours.splitlines() if line.startswith(EVENTS)] == [
        line for line in theirs.splitlines() if line.startswith(EVENTS)
    ]


def test_disabled_governs_the_line_s_own_logger_only(logs, tmp_path, monkeypatch):
    # as logging's `disabled`: lightning.pytorch disabled keeps its children's lines, rank_zero's stops its own
    monkeypatch.setattr(logging.getLogger("lightning.pytorch"), "disabled", True)
    monkeypatch.setattr(logging.getLogger("lightning.pytorch.utilities.rank_zero"), "disabled", True)
    _fit(pl, tmp_path / "lightning")
    theirs = _said(logs, tmp_path / "lightning")
    _fit(trainmesh, tmp_path / "trainmesh")
    assert _said(logs, tmp_path / "trainmesh") == theirs
    assert theirs and all(line.startswith("Metric ") for line in theirs)


def test_trainer_says_which_accelerators_there_are_as_lightning_s(logs, tmp_path):
    pl.Trainer(logger=False, default_root_dir=str(tmp_path))
    theirs = [r.getMessage() for r in logs.records if r.getMessage().startswith(("GPU ", "TPU "))]
    logs.clear()
    trainmesh.Trainer(logger=False, default_root_dir=str(tmp_path))
    ours = [r.getMessage() for r in logs.records if r.getMessage().startswith(("GPU ", "TPU "))]
    assert ours == theirs and len(ours) == 2  # here: "GPU available: False, used: False", "TPU available: False, ..."
