"""A TensorBoard log folder is made as the run sets up and holds ``hparams.yaml`` once the run saves
or ends well, with or without saved hyperparameters, as Lightning 2.6's ``TensorBoardLogger.save()``
writes it (``{}`` where none were logged; none after a failed setup). Found running Lightning's
transformer example: its ``version_0`` had the file, trainmesh's did not. Compared with Lightning's run of the same program: the files left and each
``hparams.yaml``'s text, for TensorBoard beside CSV, with and without ``save_hyperparameters``."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")


def two_loggers(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self, width: int = 2, save: bool = False):
            super().__init__()
            if save:
                self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, width)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    texts = {}
    for save in (False, True):
        folder = root / f"save_{save}"
        # Lightning's TensorBoardLogger.NAME_HPARAMS_FILE names the file (a subclass renames it)
        tensorboard = type("Renamed", (L.loggers.TensorBoardLogger,), {"NAME_HPARAMS_FILE": "params.yaml"})
        loggers = [
            (tensorboard if save else L.loggers.TensorBoardLogger)(folder, name="tb"),
            L.loggers.CSVLogger(folder, name="csv"),
        ]
        trainer = L.pl.Trainer(**trainer_kwargs(folder, max_epochs=1, logger=loggers, enable_checkpointing=False))
        data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
        model = Model(save=save)
        trainer.fit(model, data)
        texts.update({str(p.relative_to(root)): p.read_text() for p in sorted(folder.rglob("*.yaml"))})
    failing = root / "failed"  # a callback's setup fails: the folder is made, and no hparams.yaml written

    class Failing(L.pl.Callback):
        def setup(self, trainer, pl_module, stage):
            raise RuntimeError("setup fails")

    loggers = [L.loggers.TensorBoardLogger(failing, name="tb")]
    trainer_failing = L.pl.Trainer(**trainer_kwargs(failing, max_epochs=1, logger=loggers, callbacks=[Failing()]))
    with pytest.raises(RuntimeError, match="setup fails"):
        trainer_failing.fit(Model(save=True), data)
    texts["failed"] = sorted(str(p.relative_to(failing)).split(".")[0] for p in failing.rglob("*") if p.is_file())
    found = outcome(trainer, model, root)
    found["files"] = [name for name in found["files"] if "events.out" not in name]  # named by time and host
    return found, texts


def test_hparams_file_is_written_as_lightnings(tmp_path):
    found = run_both(two_loggers, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"][1]["save_False/tb/version_0/hparams.yaml"] == "{}\n"
    assert "save_True/tb/version_0/params.yaml" in found["lightning"][1]
