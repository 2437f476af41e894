"""A logger subclass overriding ``name`` and ``version`` (Lightning's tests_pytorch/loggers/
test_tensorboard.py::test_tensorboard_log_sub_dir does): Lightning's CSVLogger and
TensorBoardLogger build ``root_dir``/``log_dir`` from those properties, so the files and the
checkpoints move there. The same files under both frameworks."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import linear_loss_module, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")


def renamed_loggers(L, root):
    """One step with each logger subclassed to name its folders itself: the paths each reports and
    the files written (event files by kind only: their names hold the time and host)."""

    def renamed(base):
        class Renamed(base):
            @property
            def name(self):
                return "name"

            @property
            def version(self):
                return "version"

        return Renamed

    class Model(L.pl.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    found = {}
    for base in (L.loggers.CSVLogger, L.loggers.TensorBoardLogger):
        logger = renamed(base)(root / base.__name__)
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=logger, log_every_n_steps=1))
        trainer.fit(Model(), DataLoader(TensorDataset(torch.ones(2, 4))))
        logger.save()
        found[base.__name__] = {
            "root_dir": str(logger.root_dir).replace(str(root), "<root>"),
            "log_dir": str(logger.log_dir).replace(str(root), "<root>"),
            "trainer.log_dir": str(trainer.log_dir).replace(str(root), "<root>"),
        }
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.suffix != ".ckpt"}
    found["files"] = sorted("events.out.tfevents" if "tfevents" in f else f for f in files)
    found["checkpoint_dirs"] = sorted({p.parent.relative_to(root).as_posix() for p in root.rglob("*.ckpt")})
    return found


def test_logger_subclass_name_and_version_place_the_files_as_lightning(tmp_path):
    """Before: trainmesh's loggers read their constructor's name (lightning_logs) and a counted
    version_0, so log_dir, the files and the checkpoints went to <save_dir>/lightning_logs/version_0."""
    found = run_both(renamed_loggers, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs["CSVLogger"]["log_dir"] == "<root>/CSVLogger/name/version"
    assert ours == theirs


def plotting_csv_logger(L, root):
    """A user's CSVLogger subclass (l-progs7 p04, stored file 42760457995) whose ``save()`` reads
    ``self.experiment.metrics_file_path`` (Lightning's ExperimentWriter) after each write, with a
    ``save_dir`` given as ``"./logs/"``: what it sees at each save, and the paths the run reports."""

    class PlottingLogger(L.loggers.CSVLogger):
        seen: list = []

        def save(self):
            super().save()
            path = self.experiment.metrics_file_path
            with open(path) if os.path.exists(path) else open(os.devnull) as file:
                self.seen.append((path, len(file.read().splitlines()), len(self.experiment.metrics)))

    root.mkdir(parents=True)
    cwd = os.getcwd()
    os.chdir(root)  # "./logs/" relative to the run's own folder
    try:
        logger = PlottingLogger(save_dir="./logs/")
        trainer = L.pl.Trainer(**trainer_kwargs(".", max_steps=3, logger=logger, log_every_n_steps=1))
        trainer.fit(linear_loss_module(L.pl), DataLoader(TensorDataset(torch.ones(2, 4)), batch_size=1))
    finally:
        os.chdir(cwd)
    return {
        "seen": logger.seen,
        "save_dir": logger.save_dir,
        "log_dir": logger.log_dir,
        "hparams": logger.experiment.hparams,
        "best": trainer.checkpoint_callback.best_model_path,
    }


def test_a_subclass_reads_the_writer_s_metrics_file_path_and_paths_keep_the_given_save_dir(tmp_path):
    """Before: AttributeError 'CustomLogger' object has no attribute 'metrics_file_path' at the first
    save (trainmesh's experiment is the logger itself), and ``save_dir="./logs/"`` came back as "logs"
    (best_model_path "logs/lightning_logs/..." where Lightning's is "./logs/lightning_logs/...")."""
    found = run_both(plotting_csv_logger, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs["log_dir"] == "./logs/lightning_logs/version_0" and theirs["seen"]
    assert ours == theirs
