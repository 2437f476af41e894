"""``self.logger`` / ``self.loggers`` on a Module, as Lightning programs use them (GAN and VAE
templates draw sample images with ``self.logger.experiment.add_image``)."""

import pytest
import torch
import yaml
from torch.utils.data import DataLoader

from helpers.models import DropoutNet, quiet_trainer, random_classification
from trainmesh.loggers import CSVLogger, TensorBoardLogger
from trainmesh.loggers.base import DummyExperiment

pytest.importorskip("tensorboard")


class ImageLoggingNet(DropoutNet):
    """Writes a sample image and an extra hyperparameter through its own logger each epoch."""

    seen: list = []

    def on_train_epoch_end(self):
        type(self).seen.append((self.logger, list(self.loggers)))
        self.logger.experiment.add_image("samples", torch.rand(1, 4, 4), self.global_step)
        self.logger.log_hyperparams({"latent_dim": 7})


def test_module_writes_images_and_hparams_through_its_logger(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensorboard, csv = TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")
    ImageLoggingNet.seen = []
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=2, logger=[tensorboard, csv])
    model = ImageLoggingNet()
    trainer.fit(model, DataLoader(random_classification(), batch_size=8))

    assert [(first, rest) for first, rest in ImageLoggingNet.seen] == [(tensorboard, [tensorboard, csv])] * 2
    events = EventAccumulator(tensorboard.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert [event.step for event in events.Images("samples")] == [2, 4]
    hparams = yaml.safe_load((tmp_path / "tb" / "version_0" / "hparams.yaml").read_text())
    # the module's own, saved as the fit starts; the one added later is not (Lightning's save() writes
    # the file once: scratch run l-tests6/scratch/modlog.py)
    assert hparams["lr"] == 0.05 and "latent_dim" not in hparams
    assert model.logger is tensorboard  # still attached after fit, as in Lightning


def test_no_logger_is_none_and_other_ranks_get_a_dummy_experiment(tmp_path, monkeypatch):
    model = DropoutNet()
    assert model.logger is None and model.loggers == []  # no Trainer yet
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, logger=False)
    trainer.fit(model, DataLoader(random_classification(), batch_size=8))
    assert model.logger is None and model.loggers == []

    # On a rank other than 0 every call is accepted and nothing is written.
    monkeypatch.setenv("RANK", "1")
    tensorboard, csv = TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")
    for logger in (tensorboard, csv):
        assert isinstance(logger.experiment, DummyExperiment)
        logger.experiment.add_image("samples", torch.rand(1, 4, 4), 0)
        logger.experiment.add_histogram("w", torch.rand(5), global_step=0)
        logger.log_hyperparams({"latent_dim": 7})
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("RANK", "0")
    assert csv.experiment is csv
