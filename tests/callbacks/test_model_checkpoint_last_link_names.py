"""``ModelCheckpoint(save_last="link")`` whose last name changes with the epoch (``CHECKPOINT_NAME_LAST =
"last-{epoch}"``), and ``save_last`` read from a command line, beside Lightning 2.6 (reduced from
Lightning's tests/tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_save_last
and ::test_save_last_cli)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def last_links_named_by_epoch(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class EpochLast(L.callbacks.ModelCheckpoint):
        CHECKPOINT_NAME_LAST = "last-{epoch}"

    data = TensorDataset(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), torch.randn(8, 1))
    saver = EpochLast(dirpath=root, save_top_k=-1, save_last="link")
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, logger=False, callbacks=[saver]))
    trainer.fit(Model(), DataLoader(data, batch_size=4))
    links = {name: os.readlink(root / name) for name in os.listdir(root) if os.path.islink(root / name)}
    return sorted(os.listdir(root)), links, os.path.basename(saver.last_model_path)


def test_a_last_link_named_by_epoch_replaces_the_previous_one(tmp_path):
    """Before: trainmesh left last-epoch=0.ckpt and last-epoch=1.ckpt beside last-epoch=2.ckpt (Lightning
    removes each when it links the next)."""
    found = run_both(last_links_named_by_epoch, tmp_path)
    assert found["lightning"][1] == {"last-epoch=2.ckpt": "epoch=2-step=6.ckpt"}
    assert found["trainmesh"] == found["lightning"]


@pytest.mark.parametrize("value", ["yes", "false", "link", "1", "links"])
def test_save_last_parses_from_a_command_line_as_lightnings(value):
    """Before: trainmesh's ``save_last: bool | str | None`` took any word ("1", "links") as a string, where
    Lightning's ``Literal[True, False, "link"] | None`` refuses it on the command line."""
    from jsonargparse import ArgumentParser

    parsed = {}
    for name in ("lightning", "trainmesh"):
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(port(name).callbacks.ModelCheckpoint, "checkpoint")
        try:
            parsed[name] = parser.parse_args(["--checkpoint.save_last", value]).checkpoint.save_last
        except Exception as error:  # jsonargparse's ArgumentError
            parsed[name] = type(error).__name__
    assert parsed["trainmesh"] == parsed["lightning"]
