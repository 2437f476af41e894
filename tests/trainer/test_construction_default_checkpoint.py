"""The Trainer's default checkpoint callback is Lightning 2.6.6's ``ModelCheckpoint()``: its folder holds
only ``epoch=E-step=S.ckpt`` (no ``last.ckpt``), ``last_model_path`` stays "", and ``validate/test`` and a
new Trainer's ``fit`` with ``ckpt_path="last"`` find no last checkpoint (Lightning's warning; the weights as
they are, a fit from scratch). Before, trainmesh's default was ``ModelCheckpoint(save_last=True)``: two files,
and the evaluations loaded ``last.ckpt`` (val_loss 0.9928 where Lightning reports 1.7521). trainmesh's
automatic resume after a restart or preemption still takes the newest complete checkpoint of any name
(``tests/trainer/test_resume_newest.py``)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _module(package):
    class Net(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def _loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator))
    return DataLoader(data, batch_size=4)


def _trainer(package, root, max_epochs: int):
    logger = package.loggers.CSVLogger(str(root), version=0)  # a fixed folder: a second run writes beside the first
    return package.Trainer(
        max_epochs=max_epochs,
        default_root_dir=root,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _relative(path: str, root) -> str:
    return os.path.relpath(path, root) if path else ""


def _last_warnings(caught) -> list[str]:
    return [str(w.message).split(" is set")[0] for w in caught if "no last checkpoint available" in str(w.message)]


def _first_fit(package, root) -> dict:
    package.seed_everything(0)
    trainer = _trainer(package, root, max_epochs=2)
    trainer.fit(_module(package), _loader(), _loader())
    callback = trainer.checkpoint_callback
    seen: dict = {
        "files": sorted(os.listdir(root / "lightning_logs" / "version_0" / "checkpoints")),
        "save_last": callback.save_last,
        "last_model_path": _relative(callback.last_model_path, root),
        "best_model_path": _relative(callback.best_model_path, root),
        "state last_model_path": callback.state_dict()["last_model_path"],
    }
    for stage in ("validate", "test"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = getattr(trainer, stage)(_module(package), _loader(), ckpt_path="last", verbose=False)
        seen[stage] = (trainer.ckpt_path, _last_warnings(caught), {k: round(v, 4) for k, v in results[0].items()})
    return seen


def test_default_checkpoint_files_and_last_as_lightning(tmp_path):
    expected = _first_fit(pl, tmp_path / "lightning")
    assert expected["files"] == ["epoch=1-step=8.ckpt"] and expected["last_model_path"] == ""
    assert _first_fit(trainmesh, tmp_path / "trainmesh") == expected


def _second_fit(package, root) -> tuple:
    _first_fit(package, root)
    package.seed_everything(0)
    trainer, module = _trainer(package, root, max_epochs=3), _module(package)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, _loader(), _loader(), ckpt_path="last")
    files = sorted(os.listdir(root / "lightning_logs" / "version_0" / "checkpoints"))
    return trainer.ckpt_path, _last_warnings(caught), files, trainer.global_step, module.layer.weight.detach()


def test_fit_last_from_a_new_trainer_in_the_same_folder_as_lightning(tmp_path):
    """Lightning trains from scratch (no last checkpoint) where trainmesh resumed the first run's file."""
    *expected, expected_weight = _second_fit(pl, tmp_path / "lightning")
    assert expected[:3] == [None, ['.fit(ckpt_path="last")'], ["epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"]]
    *seen, weight = _second_fit(trainmesh, tmp_path / "trainmesh")
    assert seen == expected
    torch.testing.assert_close(weight, expected_weight)
