"""A program's own logger written to Lightning 2.6's ``Logger`` interface (``name``, ``version``,
``log_hyperparams``, ``log_metrics``; no ``save_dir`` or ``log_dir``), under Lightning 2.6.6 and
trainmesh: the run works, the logger receives the same metric names at the same steps, and the
default ModelCheckpoint writes to the same place under ``default_root_dir``
(``<name>/version_<version>/checkpoints``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import linear_loss_module

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


def _run(framework, root):
    rows: list[tuple[int, list[str]]] = []

    class Recorder(framework.loggers.Logger):
        @property
        def name(self):
            return "recorder"

        @property
        def version(self):
            return 3

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            rows.append((step, sorted(metrics)))

    torch.manual_seed(0)
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=Recorder(),
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(linear_loss_module(framework), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    written = sorted(str(path.relative_to(root)) for path in root.rglob("*.ckpt"))
    return rows, written


def test_a_logger_without_a_folder_runs_and_checkpoints_as_lightning(tmp_path) -> None:
    their_rows, theirs = _run(L, tmp_path / "lightning")
    our_rows, ours = _run(tm, tmp_path / "trainmesh")
    assert ours == theirs == ["recorder/version_3/checkpoints/epoch=1-step=8.ckpt"]
    assert our_rows == their_rows
