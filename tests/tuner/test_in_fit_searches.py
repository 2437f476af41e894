"""The Tuner's searches and the finder callbacks run their trials inside one fit, as Lightning 2.6's:
``prepare_data``, ``setup`` and ``configure_optimizers`` once, the module's ``on_fit_start`` /
``on_fit_end`` never in a Tuner's search (its fit ends after it, with ``teardown``), the callbacks'
hooks not inside a trial, ``on_save_checkpoint`` / ``on_load_checkpoint`` around the search, the
loaders asked for where Lightning asks (the first train loader after ``setup``, the validation
loader once more as a batch size search ends); a ``setup`` that draws random numbers, and a fit after
the search, train the same weights and count the fit's batches alone. The module's ``on_fit_start`` and ``on_train_start`` see the global
generator as Lightning's do: a finder callback sets the fit's train data up as its search ends, its
first iterator made there (under the learning-rate search's ``isolate_rng``), as Lightning's."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import flat_weights, quiet_trainer

_X = torch.randn(24, 3, generator=torch.Generator().manual_seed(0))
_MODULE_HOOKS = (
    "prepare_data",
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_train_start",
    "on_train_end",
    "on_save_checkpoint",
    "on_load_checkpoint",
)


def _run(framework, tmp_path, search: str, where: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    calls: list[str] = []

    class Loaders:
        batch_size = 2

        def train_dataloader(self) -> DataLoader:
            calls.append(f"train_dataloader({self.batch_size})")
            return DataLoader(TensorDataset(_X, _X[:, :1]), batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            calls.append("val_dataloader")
            return DataLoader(TensorDataset(_X[:4], _X[:4, :1]), batch_size=2)

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.lr = torch.nn.Linear(3, 1), 0.1

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            calls.append("configure_optimizers")
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    def record(owner: str, name: str):
        def hook(self, *args, **kwargs):
            calls.append(f"{owner}.{name}")
            if owner == "M" and name in ("on_fit_start", "on_train_start"):
                calls[-1] += f" rng={hash(torch.get_rng_state().numpy().tobytes())}"
            if owner == "M" and name == "setup":
                torch.rand(1)  # a setup that draws

        return hook

    for name in _MODULE_HOOKS:
        setattr(Model, name, record("M", name))  # the test's own classes
    Module = type("Module", (Loaders, Model), {}) if where == "module" else Model
    Data = type("Data", (Loaders, framework.LightningDataModule), {})
    Callback = type("Callback", (framework.Callback,), {n: record("C", n) for n in _MODULE_HOOKS[1:]})
    callbacks = [Callback()]
    if search == "BatchSizeFinder":
        callbacks.append(framework.callbacks.BatchSizeFinder(steps_per_trial=2, max_trials=3))
    elif search == "LearningRateFinder":
        callbacks.append(framework.callbacks.LearningRateFinder(num_training_steps=4))
    trainer = quiet_trainer(
        framework=framework, max_epochs=1, limit_val_batches=1, callbacks=callbacks, default_root_dir=tmp_path
    )
    torch.manual_seed(0)
    model = Module()
    data: dict = {"datamodule": Data()} if where == "datamodule" else {}
    if where == "given":  # loaders passed to fit
        data = {"train_dataloaders": Loaders().train_dataloader(), "val_dataloaders": Loaders().val_dataloader()}
    if search == "power" or search == "binsearch":
        framework.tuner.Tuner(trainer).scale_batch_size(model, mode=search, steps_per_trial=2, max_trials=3, **data)
    elif search == "lr_find":
        framework.tuner.Tuner(trainer).lr_find(model, num_training=6, **data)
    calls.append("fit")
    trainer.fit(model, **data)
    # the fit loop's counts after it: the search's trials not among them (Lightning restores its loops)
    epoch_loop = trainer.fit_loop.epoch_loop
    batches, validated = epoch_loop.batch_progress, epoch_loop.val_loop.batch_progress
    calls.append(f"batches {batches.total.completed} {batches.current.completed} validated {validated.total.completed}")
    return calls, flat_weights(model), torch.get_rng_state()


@pytest.mark.parametrize(
    ("search", "where"),
    [
        ("power", "module"),
        ("lr_find", "module"),
        ("BatchSizeFinder", "datamodule"),
        ("LearningRateFinder", "module"),
        ("LearningRateFinder", "given"),
    ],
)
def test_hooks_loaders_and_weights_are_lightning_s(tmp_path, monkeypatch, search, where) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.tuner.batch_size_scaling as scaling

    import trainmesh

    # Lightning's gc.collect() after each trial (for CUDA memory) costs about a second in a full test
    # process and changes no number or hook: skipped for this test
    monkeypatch.setattr(scaling, "garbage_collection_cuda", lambda: None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on loader workers
        expected = _run(lightning, tmp_path / "lightning", search, where)
        got = _run(trainmesh, tmp_path / "trainmesh", search, where)
    assert got[0] == expected[0]
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=1e-6)
    assert torch.equal(got[2], expected[2])


def _lr_find_then_fit(framework, tmp_path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)  # the loader shuffles with its own: isolate_rng leaves it

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.lr = torch.nn.Linear(3, 1), 0.1

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(_X, _X[:, :1]), batch_size=2, shuffle=True, generator=generator)

    torch.manual_seed(0)
    model = Model()
    trainer = quiet_trainer(framework=framework, max_epochs=1, default_root_dir=tmp_path)
    framework.tuner.Tuner(trainer).lr_find(model, num_training=4)
    after_search = generator.get_state()
    trainer.fit(model)
    return after_search, generator.get_state(), flat_weights(model)


def test_lr_find_makes_the_loader_s_iterator_as_it_ends(tmp_path) -> None:
    """Lightning's lr_find ends making the train loader's iterator (its fit loop's setup_data), which the
    Tuner's fit drops: a loader with a generator of its own has drawn its base seed from it, so the fit
    after the search shuffles as Lightning's."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on loader workers, its suggestion's few points
        expected = _lr_find_then_fit(lightning, tmp_path / "lightning")
        got = _lr_find_then_fit(trainmesh, tmp_path / "trainmesh")
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[1], expected[1])
    torch.testing.assert_close(got[2], expected[2], rtol=0, atol=1e-6)
