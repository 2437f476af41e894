"""Profilers (trainmesh/profilers, trainer/profiling.py) against Lightning 2.6's: the same program
(fit with the sanity check and validation, save_checkpoint, validate, test, predict) under
``Trainer(profiler=SimpleProfiler(filename="perf"))`` in each framework records the same action names
and writes the same report files (``<stage>-perf.txt`` in the log directory).

The difference, measured here: Lightning also records every hook of every callback and of the module
that nobody overrides (their bodies are empty), the calls into its strategy (``[Strategy]...``) and
the module hooks trainmesh runs without its hook dispatcher (the batch-transfer, optimizer-step,
zero-grad, gradient-clipping and model-mode hooks, ``configure_callbacks``, ``on_save_checkpoint``);
both name the strategy's steps by its class (``[Strategy]SingleDeviceStrategy.training_step``;
trainmesh's includes backward).
Of the actions that run code of the program, and the loop's own, trainmesh records each one
Lightning does, and no other."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh import profilers

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch import profilers as pl_profilers  # noqa: E402
from lightning.pytorch.utilities.model_helpers import is_overridden  # noqa: E402


def program(base_module, base_callback, trainer_class, profiler, root):
    class Net(base_module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            pass

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def on_train_epoch_start(self):
            pass

        def on_validation_epoch_end(self):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Watch(base_callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            pass

        def on_validation_end(self, trainer, module):
            pass

        def on_test_start(self, trainer, module):
            pass

    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)
    trainer = trainer_class(
        max_epochs=2,
        num_sanity_val_steps=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
        callbacks=[Watch()],
        profiler=profiler,
    )
    model, out = Net(), {}
    trainer.fit(model, data, data)
    trainer.save_checkpoint(f"{root}/last.ckpt")
    out["fit"] = set(profiler.recorded_durations)
    for stage, run in [
        ("validate", lambda: trainer.validate(model, data, verbose=False)),
        ("test", lambda: trainer.test(model, data, verbose=False)),
        ("predict", lambda: trainer.predict(model, data)),
    ]:
        run()
        out[stage] = set(profiler.recorded_durations)  # the durations of every stage so far
    return out, model, trainer.callbacks


def program_actions(actions, model, callbacks):
    """Lightning's actions less those of hooks nobody overrides and of its strategy."""
    kept = set()
    objects = {f"[LightningModule]{type(model).__name__}": model}
    objects.update({f"[Callback]{cb.state_key}": cb for cb in callbacks})
    for action in actions:
        owner, _, hook = action.rpartition(".")
        if action.startswith("[Strategy]"):
            continue
        if owner in objects and not is_overridden(hook, objects[owner]):
            continue
        kept.add(action)
    return kept


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("profilers")
    theirs = program(
        pl.LightningModule, pl.Callback, pl.Trainer, pl_profilers.SimpleProfiler(filename="perf"), str(root / "pl")
    )
    ours = program(
        tm.LightningModule, tm.Callback, tm.Trainer, profilers.SimpleProfiler(filename="perf"), str(root / "tm")
    )
    return root, theirs, ours


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_the_actions_are_lightnings(runs, stage):
    _, (theirs, model, callbacks), (ours, _, _) = runs
    expected = program_actions(theirs[stage], model, callbacks)
    assert {a for a in ours[stage] if not a.startswith("[Strategy]")} == expected
    # The steps the strategy runs, named by its class as Lightning's
    steps = {a for a in theirs[stage] if a.startswith("[Strategy]") and a.endswith("_step")}
    assert {a for a in ours[stage] if a.startswith("[Strategy]")} == steps
    # What the comparison covers: the loop's actions and the overridden hooks.
    assert {"run_training_epoch", "run_training_batch", "save_checkpoint"} <= expected
    assert "[LightningModule]Net.on_train_epoch_start" in expected
    assert any(a.endswith("Watch.on_train_batch_end") for a in expected)


def test_the_report_files_are_lightnings(runs):
    root, _, _ = runs
    for framework in ("pl", "tm"):
        names = sorted(p.name for p in (root / framework).iterdir() if p.suffix == ".txt")
        assert names == ["fit-perf.txt", "predict-perf.txt", "test-perf.txt", "validate-perf.txt"]
        report = (root / framework / "fit-perf.txt").read_text()
        assert report.startswith("FIT Profiler Report") and "run_training_batch" in report


@pytest.mark.parametrize("name", ["simple", "advanced", "pytorch"])
def test_profiler_by_name(tmp_path, name):
    """``Trainer(profiler=name)`` builds Lightning's class of that name; each records the run."""

    class Net(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 4)), 2)
    trainer = tm.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path), profiler=name
    )
    assert type(trainer.profiler).__name__ == type(pl.Trainer(profiler=name, logger=False).profiler).__name__
    trainer.profiler.filename = "perf"
    trainer.fit(Net(), data)
    report = (tmp_path / "fit-perf.txt").read_text()
    assert report.startswith("FIT Profiler Report")
    if name == "pytorch":
        assert "Self CPU" in report  # torch's operator table
        assert list(tmp_path.glob("fit-perf-*training_step*.pt.trace.json"))  # the Chrome trace of the recorded steps
    with pytest.raises(ValueError, match="one of"):
        tm.Trainer(profiler="fancy")


def test_pytorch_profiler_counts_the_evaluation_steps_as_lightning(tmp_path):
    """The PyTorch profiler's default schedule needs 5 steps; both frameworks count a validation's as
    sum(num_val_batches) + sum(num_sanity_val_batches) (lists: adding a number to them raised a
    TypeError here) and warn that they override the schedule for 3 batches."""
    found = []
    for base, trainer_class, profiler_class in (
        (pl.LightningModule, pl.Trainer, pl_profilers.PyTorchProfiler),
        (tm.LightningModule, tm.Trainer, profilers.PyTorchProfiler),
    ):

        class Net(base):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 2)

            def validation_step(self, batch, batch_idx):
                self.log("v", self.layer(batch[0]).sum())

        root = str(tmp_path / trainer_class.__module__.split(".")[0])
        trainer = trainer_class(
            accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=root, profiler=profiler_class()
        )
        with pytest.warns(UserWarning, match="schedule will be overridden"):
            trainer.validate(Net(), DataLoader(TensorDataset(torch.randn(12, 4)), 4), verbose=False)
        found.append((trainer.num_val_batches, trainer.num_sanity_val_batches))
    assert found == [([3], [])] * 2
