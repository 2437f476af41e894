"""What a ddp run says as it forms its group and reduces its epoch values, line for line as Lightning 2.6's.

One process, in-process, Lightning's ``Trainer(strategy="ddp", devices=1)`` beside trainmesh's (each forms a
group of one, as under 2 processes, without a launch), both as SLURM would start them:

- the group's banner (strategies/process_group.py): "Initializing distributed: GLOBAL_RANK..." at INFO on
  every rank, then rank 0's "distributed_backend=... All distributed processes registered" block;
- the sync_dist advice (trainer/results.py): once per name, for an epoch value logged without ``sync_dist``
  whenever a process group exists (one process too), not for one logged with ``sync_dist=True`` and
  ``rank_zero_only=True``;
- the SLURM line (trainer/stage_setup.py): "SLURM auto-requeueing enabled. Setting signal handlers."
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmesh.launchers.environments import find_free_port

pl = pytest.importorskip("lightning.pytorch")

SAID = ("Initializing distributed", "distributed_backend", "SLURM auto-requeueing")


def _run(lightning, tmp_path):
    base = pl.LightningModule if lightning else __import__("trainmesh").LightningModule
    trainer_class = pl.Trainer if lightning else __import__("trainmesh").Trainer

    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("pgo_train", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("pgo_val", self.layer(batch[0]).sum())
            self.log("pgo_zero", 1.0, rank_zero_only=True, sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    loggers = [logging.getLogger(name) for name in ("lightning.fabric", "lightning.pytorch", "trainmesh")]
    for logger in loggers:
        logger.addHandler(handler)
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = trainer_class(
                strategy="ddp", devices=1, accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
            )  # fmt: skip
            trainer.fit(Net(), loader, loader)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        if torch.distributed.is_initialized():  # Lightning leaves its group formed (trainmesh's run leaves it)
            torch.distributed.destroy_process_group()
    said = [line for line in lines if line.lstrip("-\n").startswith(SAID)]
    advice = sorted(str(w.message) for w in caught if "sync_dist=True" in str(w.message))
    return said, advice


def test_ddp_says_what_lightning_says_forming_its_group_and_reducing_epoch_values(tmp_path, monkeypatch):
    for key, value in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "job", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                       "SLURM_NODEID": "0", "SLURM_JOB_ID": "1", "SLURM_NTASKS_PER_NODE": "1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_PORT", str(find_free_port()))
    theirs = _run(True, tmp_path / "pl")
    monkeypatch.setenv("MASTER_PORT", str(find_free_port()))
    ours = _run(False, tmp_path / "tm")
    assert theirs[0][0] == "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1"  # the case is the one meant
    assert len(theirs[1]) == 2
    assert ours == theirs
