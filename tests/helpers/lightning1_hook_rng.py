"""Where a pytorch-lightning 1.x program's hooks see torch's random generator: ``measure("pytorch_lightning")`` is
recorded under 1.9.5 by ``record_lightning_1_9_hook_rng.py`` (its own venv) and compared with
``measure("trainmesh")`` by ``tests/trainer/lightning1/test_hook_rng.py``.

A hook that builds a model or samples (a callback making a new VAE in ``on_validation_start``, l-progs15 p03) gets
the numbers its generator holds there; the loaders' iterators draw from the same generator (a base seed per
``iter()``, a shuffling sampler's seed), so where each iterator is made decides what every hook sees.
"""

import importlib
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader

HOOKS = (
    "setup",
    "on_fit_start",
    "on_sanity_check_start",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_end",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_train_epoch_end",
    "on_fit_end",
    "on_test_start",
    "on_test_epoch_start",
    "on_test_batch_start",
    "on_predict_start",
    "on_predict_epoch_start",
    "on_predict_batch_start",
)


def _draw() -> float:
    """One number from torch's generator, put back afterwards, so the probe changes nothing it measures."""
    state = torch.get_rng_state()
    value = round(torch.rand(()).item(), 6)
    torch.set_rng_state(state)
    return value


def hook_draws(
    pl, *, workers: int, sanity: bool, val_loaders: int = 1, lightning1: bool = True, reload: bool = False
) -> list:
    """(hook, draw) at each hook of a fit (shuffling train loader, ``workers`` workers, two epochs), a test and a
    predict run of a module with a 1.x hook (``training_epoch_end``; ``lightning1=False``: without it); ``reload``:
    the loaders asked for again every epoch (``reload_dataloaders_every_n_epochs=1``)."""
    seen = []

    class Probe(pl.Callback):
        pass

    for name in HOOKS:

        def record(self, *args, _name=name, **kwargs):
            seen.append([_name, _draw()])

        setattr(Probe, name, record)

    def loader(shuffle):
        data = torch.arange(16.0).reshape(8, 2)
        return DataLoader(data, batch_size=4, shuffle=shuffle, num_workers=workers)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            seen.append(["training_step", _draw()])
            return self.layer(batch).pow(2).mean()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch).sum()

        def test_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Lightning1Module(Module):
        def training_epoch_end(self, outputs):
            pass

    torch.manual_seed(0)
    model = Lightning1Module() if lightning1 else Module()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=2,
            limit_train_batches=1,
            num_sanity_val_steps=2 if sanity else 0,
            reload_dataloaders_every_n_epochs=1 if reload else 0,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[Probe()],
        )
        val = [loader(False) for _ in range(val_loaders)]
        trainer.fit(model, loader(True), val if val_loaders > 1 else val[0])
        seen.append(["after_fit", _draw()])
        trainer.test(model, loader(False), verbose=False)
        trainer.predict(model, loader(False))
    seen.append(["after_predict", _draw()])
    return seen


VARIANTS = {
    f"workers={workers},sanity={sanity},val_loaders={loaders}": {
        "workers": workers,
        "sanity": sanity,
        "val_loaders": loaders,
    }
    for workers in (0, 1)
    for sanity in (True, False)
    for loaders in (1, 2)
} | {
    f"workers={workers},sanity={sanity},val_loaders=1,reload": {
        "workers": workers,
        "sanity": sanity,
        "reload": True,
    }
    for workers in (0, 1)
    for sanity in (True, False)
}


def measure(package: str) -> dict:
    pl = importlib.import_module(package)
    return {name: hook_draws(pl, **variant) for name, variant in VARIANTS.items()}
