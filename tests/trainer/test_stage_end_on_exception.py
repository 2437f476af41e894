"""An error raised inside a callback's ``on_exception``, as Lightning 2.6.6's ``_interrupt`` lets it out:
that error reaches the caller with the run's own as its ``__context__``, and the rest of ``_interrupt``
never runs (the later callbacks' ``on_exception``, the loggers' ``finalize("failed")``); the Trainer stays
INTERRUPTED in its stage. Before: trainmesh dropped the hook's error, raised the run's and called the rest
(/work/progs/owner-small6 i2.py)."""

from __future__ import annotations

import pytest
import torch

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _run(package, tmp_path):
    calls: list[str] = []

    class Crash(package.Callback):
        def on_train_batch_end(self, *args):
            raise ValueError("the run's own error")

    class Raising(package.Callback):
        def on_exception(self, trainer, pl_module, exception):
            calls.append(f"raising {exception!r}")
            raise RuntimeError("raised in on_exception")

    class Later(package.Callback):
        def on_exception(self, trainer, pl_module, exception):
            calls.append("later")

    class Recording(package.loggers.CSVLogger):
        def finalize(self, status):
            calls.append(f"finalize {status}")

    class Net(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)

    trainer = package.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        logger=Recording(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Crash(), Raising(), Later()],
    )
    with pytest.raises(BaseException) as raised:
        trainer.fit(Net())
    error = raised.value
    seen = (type(error).__name__, str(error), repr(error.__context__), error.__cause__)
    return seen, calls, (trainer.state.status.value, trainer.state.stage.value, trainer.interrupted)


def test_an_error_raised_in_on_exception_reaches_the_caller_as_lightning_s(tmp_path):
    theirs = _run(pl, tmp_path / "lightning")
    assert theirs[0][:2] == ("RuntimeError", "raised in on_exception")
    assert _run(trainmesh, tmp_path / "trainmesh") == theirs
