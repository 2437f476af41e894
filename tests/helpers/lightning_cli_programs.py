"""The program ``tests/cli/test_lightning_cli_differential.py`` runs under Lightning 2.6's ``LightningCLI``
and trainmesh's: the same model and data module on each library's base classes (module-level names, so
that a config's ``class_path`` finds them), and the helpers that turn what each CLI parsed or built into
comparable data."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import lightning.pytorch.cli as lcli
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
import trainmesh.cli as tcli


def make_classes(framework: str) -> tuple[type, type]:
    """The same small model and data module on Lightning's or trainmesh's base classes."""
    module_base, data_base = (
        (L.LightningModule, L.LightningDataModule) if framework == "lightning" else (tm.Module, tm.DataModule)
    )

    class Net(module_base):
        def __init__(self, hidden: int = 8, lr: float = 0.1, milestones: tuple[int, ...] = (1, 2)) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Linear(4, hidden)
            self.out = torch.nn.Linear(hidden, 1)

        def forward(self, x):
            return self.out(self.net(x))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    class Data(data_base):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.batch_size = batch_size

        def _loader(self):
            x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size)

        def train_dataloader(self):
            return self._loader()

        def val_dataloader(self):
            return self._loader()

    # module-level names, so that a config's class_path finds them (subclass mode)
    for cls, role in ((Net, "Net"), (Data, "Data")):
        cls.__name__ = cls.__qualname__ = f"{framework.title()}{role}"
        globals()[cls.__name__] = cls
    return Net, Data


CLASSES = {name: make_classes(name) for name in ("lightning", "trainmesh")}


def normal(value):
    """A config as data, with each class path reduced to its class name (lightning.pytorch.callbacks.X
    and trainmesh.callbacks.X are the same class name) and the version header dropped."""
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items() if k != "__path__"}
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, str) and value.count(".") >= 2 and value.split(".")[0] in ("lightning", "trainmesh"):
        return value.rsplit(".", 1)[1]
    return value


def without_own(config: dict, own: bool = False) -> dict:
    from trainmesh.cli.trainer_arguments import TRAINMESH_OWN

    if own or not isinstance(config.get("trainer"), dict):
        return config
    return {**config, "trainer": {k: v for k, v in config["trainer"].items() if k not in TRAINMESH_OWN}}


def built(objects, names) -> list[tuple[str, dict]]:
    """The classes named in ``names`` among ``objects``, each with the arguments it was given."""
    return [(type(o).__name__, attributes(o, names[type(o).__name__])) for o in objects if type(o).__name__ in names]


def attributes(obj, names):
    out = {}
    for name in names:
        value = getattr(obj, name, getattr(obj, f"_{name}", None))
        out[name] = str(value) if isinstance(value, Path) else value
    return out


class _Callables:
    """Lightning's documented pattern: the optimizer and scheduler as ``__init__`` arguments."""

    def configure_optimizers(self):
        optimizer = self.optimizer(self.parameters())
        return [optimizer], [self.scheduler(optimizer)]


class LightningCallables(_Callables, L.LightningModule):
    def __init__(
        self,
        optimizer: lcli.OptimizerCallable = torch.optim.Adam,
        scheduler: lcli.LRSchedulerCallable = torch.optim.lr_scheduler.ConstantLR,
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.optimizer, self.scheduler = optimizer, scheduler


class TrainmeshCallables(_Callables, tm.Module):
    def __init__(
        self,
        optimizer: tcli.OptimizerCallable = torch.optim.Adam,
        scheduler: tcli.LRSchedulerCallable = torch.optim.lr_scheduler.ConstantLR,
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.optimizer, self.scheduler = optimizer, scheduler
