"""hparams.yaml as Lightning 2.6 writes it (``core/saving.py`` ``save_hparams_to_yaml``): each saved
value as ``yaml.dump`` writes it, so a class, a tuple or an Enum given to ``save_hyperparameters``
reads back the same from either framework's file (the UvA autoencoder tutorial saves its
``encoder_class``/``decoder_class``)."""

from __future__ import annotations

import enum

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")


class Kind(enum.Enum):
    PLAIN = 1
    WIDE = 2


class Decoder(nn.Linear):
    pass


def hparams_files(L, root):
    """One step of a module saving a class, a tuple, an Enum and plain values, logged to a CSVLogger
    and a TensorBoardLogger: the text of each hparams.yaml."""

    class Model(L.pl.LightningModule):
        def __init__(self, width: int = 4, decoder_class: type = Decoder, dims=(4, 1), kind=Kind.WIDE, lr=0.1):
            super().__init__()
            self.save_hyperparameters()
            self.net = decoder_class(*dims)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    loggers = [L.loggers.CSVLogger(root, name="csv"), L.loggers.TensorBoardLogger(root, name="tb")]
    trainer = L.pl.Trainer(**trainer_kwargs(root, logger=loggers, max_steps=1, enable_checkpointing=False))
    trainer.fit(Model(), DataLoader(TensorDataset(torch.ones(2, 4)), batch_size=2))
    for logger in loggers:
        logger.save()
    return {path.relative_to(root).as_posix(): path.read_text() for path in sorted(root.rglob("hparams.yaml"))}


def test_hparams_yaml_holds_what_lightning_s_yaml_dump_writes(tmp_path):
    """Before: trainmesh wrote ``decoder_class: <class '...Decoder'>`` (a string) and ``dims: [4, 1]``,
    where Lightning writes ``!!python/name:...Decoder ''`` and ``!!python/tuple``."""
    found = run_both(hparams_files, tmp_path)
    theirs = found["lightning"]
    assert sorted(theirs) == ["csv/version_0/hparams.yaml", "tb/version_0/hparams.yaml"]
    assert "decoder_class: !!python/name:" in theirs["csv/version_0/hparams.yaml"]
    assert "kind: WIDE" in theirs["csv/version_0/hparams.yaml"]
    assert differences(theirs, found["trainmesh"]) == []
