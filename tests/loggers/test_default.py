"""``Trainer(logger=True)``, the default, logs as Lightning 2.6.6's does: a TensorBoardLogger when
``tensorboard`` (or ``tensorboardX``) is installed, else a CSVLogger, both under
``<default_root_dir>/lightning_logs/version_N`` (Lightning's ``_LoggerConnector.configure_logger``);
tensorboard itself is imported at the first write, not by ``Trainer()``."""

import csv
import logging
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.forked import can_fork, run_forked
from helpers.models import DropoutNet, random_classification
from trainmesh.loggers import CSVLogger, TensorBoardLogger

pytest.importorskip("tensorboard")


def default_trainer(root, **kwargs) -> tm.Trainer:
    return tm.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


class ImageLoggingNet(DropoutNet):
    """A GAN/VAE template's habit: sample images through ``self.logger.experiment``."""

    def on_train_epoch_end(self):
        self.logger.experiment.add_image("samples", torch.rand(1, 4, 4), self.global_step)


def without_tensorboard(monkeypatch) -> None:
    for name in ("tensorboard", "tensorboardX", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)


def test_the_default_is_tensorboard_under_lightning_logs(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    trainer = default_trainer(tmp_path, max_epochs=2, limit_train_batches=2)
    assert [type(logger) for logger in trainer.loggers] == [TensorBoardLogger]
    assert trainer.log_dir == str(tmp_path / "lightning_logs" / "version_0")
    trainer.fit(ImageLoggingNet(), DataLoader(random_classification(), batch_size=8))

    run = tmp_path / "lightning_logs" / "version_0"
    assert sorted(path.name for path in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert any(path.name.startswith("events.out.tfevents") for path in run.iterdir())
    assert (run / "hparams.yaml").is_file() and os.listdir(run / "checkpoints") == ["epoch=1-step=4.ckpt"]
    events = EventAccumulator(str(run), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert [event.step for event in events.Images("samples")] == [2, 4]
    assert "train_loss_epoch" in events.Tags()["scalars"]
    assert default_trainer(tmp_path).log_dir == str(tmp_path / "lightning_logs" / "version_1")


def test_without_tensorboard_the_default_is_csv_in_the_same_place(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="trainmesh")
    without_tensorboard(monkeypatch)
    monkeypatch.setattr("trainmesh.loggers.default._told_about_csv", False)
    trainer = default_trainer(tmp_path, max_epochs=1, limit_train_batches=2, log_every_n_steps=1)
    assert [type(logger) for logger in trainer.loggers] == [CSVLogger]
    assert "tensorboard is not installed" in caplog.text
    caplog.clear()
    trainer.fit(DropoutNet(), DataLoader(random_classification(), batch_size=8))

    run = tmp_path / "lightning_logs" / "version_0"
    assert trainer.log_dir == str(run)
    with open(run / "metrics.csv") as handle:
        assert any(row.get("train_loss_step") for row in csv.DictReader(handle))
    assert (run / "hparams.yaml").is_file() and os.listdir(run / "checkpoints") == ["epoch=0-step=2.ckpt"]
    default_trainer(tmp_path)
    assert "tensorboard is not installed" not in caplog.text  # said once


def test_in_a_slurm_batch_job_the_tensorboard_version_is_the_job_id(tmp_path, monkeypatch):
    # As Lightning's SLURMEnvironment.job_id(): a requeued job writes to the same folder.
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert default_trainer(tmp_path).log_dir == str(tmp_path / "lightning_logs" / "version_4242")
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # an interactive salloc shell: numbered versions
    assert default_trainer(tmp_path).log_dir == str(tmp_path / "lightning_logs" / "version_0")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    without_tensorboard(monkeypatch)  # Lightning's CSV default takes no job id
    assert default_trainer(tmp_path).log_dir == str(tmp_path / "lightning_logs" / "version_0")


def test_the_trainer_imports_tensorboard_at_the_first_write_only(tmp_path):
    code = (
        "import sys, trainmesh as tm\n"
        f"trainer = tm.Trainer(accelerator='cpu', devices=1, default_root_dir={str(tmp_path)!r})\n"
        "print(type(trainer.logger).__name__, 'torch.utils.tensorboard' in sys.modules)\n"
        "trainer.logger.log_metrics({'loss': 1.0}, step=0)\n"
        "print('torch.utils.tensorboard' in sys.modules)\n"
    )
    if can_fork():  # a fork of the fork server, whose imports leave tensorboard out (not a new interpreter)
        program = tmp_path / "first_write.py"
        program.write_text(code)
        result = run_forked(program, [], env=dict(os.environ), timeout=300)
    else:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["TensorBoardLogger", "False", "True"]
