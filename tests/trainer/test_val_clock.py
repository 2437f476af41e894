"""A time-based ``val_check_interval`` ("DD:HH:MM:SS", a ``timedelta``, a dict of its keywords) against
Lightning 2.6.6's, run here: each one's monotonic clock replaced by one that only the training steps
advance (one second each), so validation runs at the same batches, with the same weights and logged
metrics; with ``check_val_every_n_epoch``, an iterable stream, ``fast_dev_run``, and its bad strings."""

from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import trainmesh as tm
import trainmesh.trainer.val_clock as tm_clock

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loops import evaluation_loop, fit_loop, training_epoch_loop  # noqa: E402


class Clock:
    now = 100.0

    @classmethod
    def monotonic(cls):
        return cls.now


class _Stream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return iter(zip(self.x, self.y))


def _reads(trainer):
    """What a program reads of the interval: Lightning 2.6's trainer has no val_check_interval when it is
    time-based (hasattr False)."""
    interval = trainer.val_check_interval if hasattr(trainer, "val_check_interval") else "absent"
    return interval, trainer.val_check_batch


def run(framework, root, stream=False, checkpoint=False, **settings):
    base, trainer_class, seed = framework
    points, reads = [], []

    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def on_train_start(self):
            reads.append(_reads(self.trainer))

        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                reads.append(_reads(self.trainer))
            Clock.now += 1.0
            loss = F.cross_entropy(self.layer(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

        def on_validation_end(self):
            if not self.trainer.sanity_checking:
                points.append((self.trainer.current_epoch, self.trainer.global_step))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seed(3)
    model = Net()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
    train = DataLoader(_Stream(x, y) if stream else TensorDataset(x, y), 2)
    trainer = trainer_class(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=checkpoint,
        limit_val_batches=2,
        default_root_dir=root,
        **settings,
    )
    reads.append(_reads(trainer))
    trainer.fit(model, train, DataLoader(TensorDataset(x, y), 2))
    reads.append(_reads(trainer))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    saved = sorted(p.name for p in (Path(root) / "checkpoints").glob("*")) if checkpoint else None
    return points, reads, metrics, saved, model.state_dict()


@pytest.mark.parametrize(
    "settings",
    [
        {"val_check_interval": "00:00:00:03", "max_epochs": 2},
        {"val_check_interval": timedelta(seconds=5), "max_epochs": 3, "check_val_every_n_epoch": 2},
        {"val_check_interval": {"seconds": 3}, "max_epochs": 2, "check_val_every_n_epoch": None},
        {"val_check_interval": "00:00:00:03", "max_epochs": 2, "stream": True},
        {"val_check_interval": "00:00:00:03", "fast_dev_run": 2},
        # ModelCheckpoint saves after each validation, not at the epoch's end (Lightning's rule)
        {"val_check_interval": "00:00:00:05", "max_epochs": 2, "checkpoint": True},
    ],
    ids=["string", "timedelta_every_2_epochs", "dict_no_epoch_check", "stream", "fast_dev_run", "checkpoint"],
)
def test_validates_where_lightning_validates(tmp_path, monkeypatch, settings):
    for module in (fit_loop, training_epoch_loop, evaluation_loop, tm_clock):
        monkeypatch.setattr(module, "time", Clock)
    out = {}
    for name, framework in [
        ("pl", (pl.LightningModule, pl.Trainer, pl.seed_everything)),
        ("tm", (tm.LightningModule, tm.Trainer, tm.seed_everything)),
    ]:
        out[name] = run(framework, str(tmp_path / name), **settings)
    assert out["tm"][:4] == out["pl"][:4]
    assert out["pl"][0]  # it validated
    assert len(out["pl"][1]) >= 4  # trainer.val_check_interval / val_check_batch before, during, after the fit
    for key, value in out["pl"][4].items():
        assert torch.equal(out["tm"][4][key], value), key


@pytest.mark.parametrize("interval", ["00:00:02", "00:00:00:2s", "1:2:3:x"])
def test_bad_time_strings_are_refused_as_lightning(interval):
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration

    with pytest.raises(PlMisconfiguration) as theirs:
        pl.Trainer(val_check_interval=interval, logger=False)
    with pytest.raises(tm.utilities.exceptions.MisconfigurationException) as ours:
        tm.Trainer(val_check_interval=interval)
    assert str(ours.value) == str(theirs.value)


def test_a_time_based_interval_is_no_val_check_interval_until_one_is_set():
    """Lightning 2.6's trainer has no ``val_check_interval`` for a time-based one; a value set on it reads
    back, while the clock still decides (its loops read ``_val_check_time_interval`` first)."""
    seen = {}
    for name, trainer_class in [("pl", pl.Trainer), ("tm", tm.Trainer)]:
        trainer = trainer_class(val_check_interval=timedelta(seconds=2), logger=False, enable_progress_bar=False)
        before = _reads(trainer), trainer._val_check_time_interval
        trainer.val_check_interval = 0.5
        seen[name] = before, _reads(trainer), trainer._val_check_time_interval
    assert seen["tm"] == seen["pl"] == ((("absent", None), 2.0), (0.5, None), 2.0)
    with pytest.raises(AttributeError, match="time-based val_check_interval.*_val_check_time_interval"):
        _ = tm.Trainer(val_check_interval="00:00:00:02").val_check_interval
