"""Ctrl-C during fit (trainer/keyboard_interrupt.py) against Lightning 2.6 on one process: a
KeyboardInterrupt raised by a callback at epoch 1, batch 2 leaves the program what Lightning's
leaves: its message, ``SystemExit(1)`` with the interrupt as its context, ``trainer.interrupted``,
the INTERRUPTED status with the stage still set, the callbacks' then the data module's
``on_exception`` seeing that status, the same checkpoint files (``OnExceptionCheckpoint``'s at the
interrupted step), and the program's SIGINT handler back."""

from __future__ import annotations

import logging
import signal
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _run(name, root):
    L = port(name)
    logging.getLogger("lightning.pytorch").setLevel(logging.INFO)  # its info lines, as by default (port quiets them)
    seen = []

    class Model(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(L.pl.LightningDataModule):
        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)

        def on_exception(self, exception):
            seen.append(("datamodule", type(exception).__name__))

    class CtrlC(L.callbacks.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 2:
                raise KeyboardInterrupt

        def on_exception(self, trainer, module, exception):
            seen.append(("callback", type(exception).__name__, str(trainer.state.status), trainer.interrupted))

        def teardown(self, trainer, module, stage):
            seen.append(("teardown", stage))

    L.pl.seed_everything(0)
    callbacks = [
        CtrlC(),
        L.callbacks.OnExceptionCheckpoint(str(root)),
        L.callbacks.ModelCheckpoint(dirpath=str(root / "saved"), save_last=True),
    ]
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, callbacks=callbacks, logger=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BaseException) as raised:
            trainer.fit(Model(), datamodule=Data())
    saved = torch.load(root / "on_exception.ckpt", weights_only=False)
    return {
        "raised": (type(raised.value).__name__, getattr(raised.value, "code", None)),
        "context": type(raised.value.__context__).__name__,
        "interrupted": trainer.interrupted,
        "status": str(trainer.state.status),
        "stage": str(trainer.state.stage),
        "seen": seen,
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*.ckpt")),
        "on_exception.ckpt": (saved["epoch"], saved["global_step"]),
        "sigint": signal.getsignal(signal.SIGINT),
    }


def test_ctrl_c_during_fit_ends_as_lightning_s(tmp_path, capfd, caplog):
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        theirs = _run("lightning", tmp_path / "lightning")
    told_theirs = "\n".join(record.getMessage() for record in caplog.records)  # Lightning's logger
    caplog.clear()
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="trainmesh"):
        ours = _run("trainmesh", tmp_path / "trainmesh")
    told_ours = "\n".join(record.getMessage() for record in caplog.records)  # logged too, not printed
    assert theirs["raised"] == ("SystemExit", 1)
    assert ours == theirs
    message = "\nDetected KeyboardInterrupt, attempting graceful shutdown ..."
    assert message in told_theirs and message in told_ours and message not in capfd.readouterr().out
