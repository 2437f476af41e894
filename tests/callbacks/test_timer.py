"""``Timer`` and ``Trainer(max_time=...)`` (callbacks/timer.py) against Lightning 2.6's: the same
program, each Timer module's clock replaced by one that only the training steps advance (one second
each), stops at the same step and epoch with bit-identical weights and the same Timer state, for
``max_time`` (checked at each batch's end) and for ``Timer(interval="epoch")`` (at each epoch's end)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
import trainmesh.callbacks.timer as tm_timer
from trainmesh.callbacks import Timer

pl = pytest.importorskip("lightning.pytorch")
import lightning.pytorch.callbacks.timer as pl_timer  # noqa: E402


class Clock:
    now = 100.0

    @classmethod
    def monotonic(cls):
        return cls.now


def run(framework, root, **settings):
    base, trainer_class, seed = framework

    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            Clock.now += 1.0
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seed(3)
    model = Net()
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)), 2)
    trainer = trainer_class(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        limit_val_batches=2,
        default_root_dir=root,
        **settings,
    )
    trainer.fit(model, data, data)
    (timer,) = [cb for cb in trainer.callbacks if type(cb).__name__ == "Timer"]
    return trainer.global_step, trainer.current_epoch, timer.state_dict(), model.state_dict()


@pytest.mark.parametrize(
    "settings",
    [
        {"max_time": {"seconds": 11}},
        {"max_time": "00:00:00:11", "max_epochs": 5},
        {"timer": "epoch"},
    ],
    ids=["max_time", "max_time_string", "epoch_interval"],
)
def test_stops_where_lightning_stops(tmp_path, monkeypatch, settings):
    monkeypatch.setattr(pl_timer, "time", Clock)
    monkeypatch.setattr(tm_timer, "time", Clock)
    out = {}
    for name, framework, timer_class in [
        ("pl", (pl.LightningModule, pl.Trainer, pl.seed_everything), pl_timer.Timer),
        ("tm", (tm.LightningModule, tm.Trainer, tm.seed_everything), Timer),
    ]:
        given = dict(settings)
        if given.pop("timer", None):
            given["callbacks"] = [timer_class(duration={"seconds": 11}, interval="epoch")]
        out[name] = run(framework, str(tmp_path / name), **given)
    assert out["tm"][:3] == out["pl"][:3]
    assert 0 < out["tm"][0] < 40  # stopped by the timer, not by an epoch limit
    for key, value in out["pl"][3].items():
        assert torch.equal(out["tm"][3][key], value), key


@pytest.mark.parametrize(
    "arguments",
    [{"duration": "11 seconds"}, {"duration": "00:00:00:11", "interval": "batch"}],
    ids=["duration", "interval"],
)
def test_bad_arguments_are_refused_as_lightning(arguments):
    """Lightning's MisconfigurationException (trainmesh's is also a ValueError), with its message."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration

    from trainmesh.utilities.exceptions import MisconfigurationException

    with pytest.raises(PlMisconfiguration) as theirs:
        pl_timer.Timer(**arguments)
    with pytest.raises(MisconfigurationException) as ours:
        Timer(**arguments)
    assert isinstance(ours.value, ValueError)
    # Lightning joins a set of the intervals: its order changes between processes
    assert sorted(str(ours.value)) == sorted(str(theirs.value))


def test_times_and_a_restored_state_read_as_lightning_s(monkeypatch):
    """Before any training, after ``load_state_dict`` (a resume) and for a stage that is not
    Lightning's RunningStage: the same values, of the same types, and the same error."""
    monkeypatch.setattr(pl_timer, "time", Clock)
    monkeypatch.setattr(tm_timer, "time", Clock)

    def readings(timer):
        found = [timer.time_elapsed(), timer.time_remaining(), timer.time_elapsed("validate"), timer.start_time()]
        timer.load_state_dict({"time_elapsed": {"train": 3.5, "validate": 1.0}})
        found += [timer.time_elapsed(), timer.time_remaining("train"), timer.time_elapsed("validate")]
        found += [timer.state_dict()]
        try:
            timer.time_elapsed("fit")
        except ValueError as error:
            found.append(str(error))
        return [(type(value).__name__, value) for value in found]

    assert readings(Timer(duration={"seconds": 9})) == readings(pl_timer.Timer(duration={"seconds": 9}))
