"""``on_exception`` of a ``ddp_spawn`` fit that fails, as Lightning 2.6.6 calls it: once, in the launching
process (its ``_interrupt`` around the launch; its workers call none), with the launching process's
exception and the Trainer's state INTERRUPTED. Measured with a rank raising in a worker
(/work/progs/owner-small4: Lightning's one call in the launching process with ``ProcessRaisedException``;
trainmesh's were one per worker with the worker's own error). Here the launch fails before any process
starts (a model that cannot be pickled: Lightning's pickling error, trainmesh's refusal), so one process
runs the check. Before: no call in the launching process."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


@pytest.fixture
def no_launcher_env(monkeypatch):  # this process is no torchrun worker: ddp_spawn starts its own
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


def _calls(package) -> tuple[list[tuple[int, bool]], str]:
    calls: list[tuple[int, bool]] = []

    class Recorder(package.Callback):
        def on_exception(self, trainer, pl_module, exception):
            calls.append((os.getpid(), pl_module is model))

    class Net(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.loss_fn = lambda x: x  # cannot be pickled for the spawned processes

        def training_step(self, batch, batch_idx):
            return self.loss_fn(self.layer(batch[0])).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)

    model = Net()
    trainer = package.Trainer(
        accelerator="cpu",
        strategy="ddp_spawn",
        devices=2,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Recorder()],
    )
    with warnings.catch_warnings(), pytest.raises(Exception) as raised:
        warnings.simplefilter("ignore")
        trainer.fit(model)
    assert "pickle" in str(raised.value) or "pickle" in repr(raised.value.__cause__)
    return calls, str(trainer.state.status)


def test_on_exception_once_in_the_launching_process_as_lightning(no_launcher_env):
    expected = _calls(pl)
    assert expected == ([(os.getpid(), True)], "TrainerStatus.INTERRUPTED")
    assert _calls(trainmesh) == expected
