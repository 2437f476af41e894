"""Small Lightning 2.x programs in the style of published tutorials, each written once and run
under Lightning 2.6 or under trainmesh after the mechanical port (imports only: ``port(name)`` gives
``pl``, ``callbacks``, ``loggers`` of either). A program returns its outcome as data
(``outcome``): the metric dictionaries, the global step and epoch, metrics.csv's rows, the files
it left under its folder, what else it chose to report, and its trained weights.
"""

from __future__ import annotations

import csv
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from helpers.differential import _same, metrics_of


def port(name: str) -> SimpleNamespace:
    """``import lightning.pytorch as pl`` (``"lightning"``) or its port ``import trainmesh as pl``."""
    if name == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks, loggers

        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
        return SimpleNamespace(pl=pl, callbacks=callbacks, loggers=loggers)
    import trainmesh as tm
    from trainmesh import callbacks, loggers

    return SimpleNamespace(pl=tm, callbacks=callbacks, loggers=loggers)


def linear_loss_module(pl: Any, width: int = 4) -> Any:
    """The smallest module the logger tests train under either framework (``pl``: Lightning's or
    trainmesh's package): a Linear layer, its squared output logged as ``loss``, SGD at 0.1."""

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model()


def trainer_kwargs(root: Path, **kwargs: Any) -> dict[str, Any]:
    """The quiet single-CPU settings every program uses, plus its own."""
    return dict(accelerator="cpu", devices=1, default_root_dir=root, enable_progress_bar=False, **kwargs)


def outcome(trainer: Any, model: Any, root: Path, **extra: Any) -> dict[str, Any]:
    """What a program left, as data (``files``: every file under ``root``, relative)."""
    for logger in trainer.loggers:
        logger.save()
    rows = {}
    for path in sorted(root.rglob("metrics.csv")):
        with path.open(newline="") as file:
            rows[str(path.relative_to(root))] = [{k: v for k, v in r.items() if v != ""} for r in csv.DictReader(file)]
    return {
        "callback_metrics": metrics_of(trainer.callback_metrics),
        "logged_metrics": metrics_of(trainer.logged_metrics),
        "progress_bar_metrics": metrics_of(trainer.progress_bar_metrics),
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "csv": rows,
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()),
        "extra": extra,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


def run_both(program: Callable[[SimpleNamespace, Path], Any], root: Path, seed: int = 0) -> dict[str, Any]:
    """The program's outcome under each framework, each from the same seed in its own folder."""
    found = {}
    for name in ("lightning", "trainmesh"):
        L = port(name)
        L.pl.seed_everything(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found[name] = program(L, root / name)
    return found


def differences(theirs: Any, ours: Any, path: str = "") -> list[str]:
    """Where two outcomes differ (floats to a relative 1e-6, tensors bit for bit)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        found = [f"{path}/{k}: only one side has it" for k in theirs.keys() ^ ours.keys()]
        for key in theirs.keys() & ours.keys():
            found += differences(theirs[key], ours[key], f"{path}/{key}")
        return found
    if isinstance(theirs, torch.Tensor) and isinstance(ours, torch.Tensor):
        return [] if torch.equal(theirs, ours) else [f"{path}: tensors differ"]
    if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)) and len(theirs) == len(ours):
        return [d for i, (a, b) in enumerate(zip(theirs, ours)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if _same(theirs, ours) else [f"{path}: Lightning {theirs!r}, trainmesh {ours!r}"]
