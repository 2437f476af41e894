"""The same small program run under Lightning 2.6 and under trainmesh, its outcome as data.

One program, written once against either framework's classes (``api(name)``): a tiny module
(``Linear(4, 1)``, SGD), the data (map-style, or iterable with or without ``__len__``), one or
two validation/test loaders, automatic or manual optimization (two optimizers), and what it
logs. ``run(name, program, ...)`` runs it and returns an ``Outcome``: the callback hooks called
(with their batch and loader indices), the metrics a callback reads at chosen hooks,
``callback_metrics``/``logged_metrics``/``progress_bar_metrics`` after each stage, the rows of
metrics.csv, the checkpoint's keys and ``global_step``, and the trained weights. A test runs it
under both names and compares the two outcomes (``differences``).
"""

from __future__ import annotations

import csv
import logging
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import trainmesh as tm

SAMPLES, BATCH = 32, 4  # 8 batches an epoch

CALLBACK_HOOKS = """
    setup teardown on_fit_start on_fit_end on_sanity_check_start on_sanity_check_end
    on_train_start on_train_end on_train_epoch_start on_train_epoch_end
    on_train_batch_start on_train_batch_end
    on_validation_start on_validation_end on_validation_epoch_start on_validation_epoch_end
    on_validation_batch_start on_validation_batch_end
    on_test_start on_test_end on_test_epoch_start on_test_epoch_end on_test_batch_start on_test_batch_end
    on_predict_start on_predict_end on_predict_epoch_start on_predict_epoch_end
    on_predict_batch_start on_predict_batch_end
    on_before_backward on_after_backward on_before_optimizer_step on_before_zero_grad
    on_save_checkpoint on_load_checkpoint
""".split()
# Where the recorder also writes down what a callback reads (callback_metrics, logged_metrics, the
# optimizers' learning rates).
READ_AT = ("on_train_batch_end", "on_train_epoch_end", "on_validation_end", "on_test_end")


def api(name: str) -> SimpleNamespace:
    """The classes a program uses, from Lightning 2.6 (``"lightning"``) or trainmesh."""
    if name == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks, loggers

        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
        return SimpleNamespace(
            Module=pl.LightningModule,
            Callback=pl.Callback,
            Trainer=pl.Trainer,
            seed=pl.seed_everything,
            CSVLogger=loggers.CSVLogger,
            ModelCheckpoint=callbacks.ModelCheckpoint,
            EarlyStopping=callbacks.EarlyStopping,
            LearningRateMonitor=callbacks.LearningRateMonitor,
        )
    from trainmesh import callbacks, loggers

    return SimpleNamespace(
        Module=tm.Module,
        Callback=tm.Callback,
        Trainer=tm.Trainer,
        seed=tm.seed_everything,
        CSVLogger=loggers.CSVLogger,
        ModelCheckpoint=callbacks.ModelCheckpoint,
        EarlyStopping=callbacks.EarlyStopping,
        LearningRateMonitor=callbacks.LearningRateMonitor,
    )


class Samples(Dataset):
    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x, self.y = torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class Stream(IterableDataset):
    def __init__(self, seed: int = 0) -> None:
        self.samples = Samples(seed)

    def __iter__(self):
        return (self.samples[i] for i in range(SAMPLES))


class SizedStream(Stream):
    def __len__(self) -> int:
        return SAMPLES


DATASETS = {"map": Samples, "stream": Stream, "sized_stream": SizedStream}


@dataclass
class Program:
    """What the program does, beyond the Trainer's arguments."""

    data: str = "map"  # a key of DATASETS, for the train loader
    eval_loaders: int = 1  # validation and test loaders (the second is map-style)
    manual: bool = False  # manual optimization, two optimizers
    scheduler: str | None = None  # "epoch" or "step": a StepLR on that interval
    log_in_batch_end: bool = False  # the module logs in on_train_batch_end too
    checkpoint_monitor: str | None = None  # a ModelCheckpoint monitoring this (enables checkpointing)
    early_stopping: bool = False  # EarlyStopping on train_loss, mode "max": stops after the first epoch
    stop_at_batch: int | None = None  # the module sets trainer.should_stop after this batch of the first epoch
    random: bool = False  # a shuffling train loader, and noise drawn in each training step (dequantization)
    # A LearningRateMonitor: its logging_interval "step" or "epoch", or "scheduler" (None: each scheduler's own)
    lr_monitor: str | None = None
    param_groups: int = 1  # 2: the weight and the bias in their own groups (lr 0.1 and 0.05, momentum 0.9 and 0.5)
    none_at: tuple[int, ...] = ()  # the batches (of each epoch) whose training_step returns None after logging
    optimizer: str = "sgd"  # "adam": torch.optim.Adam(lr=0.1) (its step count is kept per parameter)


def module_class(base: type, program: Program) -> type:
    """The program's LightningModule, built on ``base``."""

    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.automatic_optimization = not program.manual
            self.lrs: list[float] = []  # the learning rate each training step ran with
            self.batch_outputs: list[Any] = []  # with none_at: on_train_batch_end's outputs (keys, loss)

        def _loss(self, batch: Any) -> torch.Tensor:
            inputs = batch[0] + torch.rand_like(batch[0]) if program.random else batch[0]
            return torch.nn.functional.mse_loss(self.layer(inputs), batch[1])

        def training_step(self, batch, batch_idx):
            self.lrs.append(self._first_optimizer().param_groups[0]["lr"])
            loss = self._loss(batch)
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            if not program.manual:
                return None if batch_idx in program.none_at else loss
            for optimizer in self.optimizers():
                optimizer.zero_grad()
                self.manual_backward(self._loss(batch))
                optimizer.step()
            return None

        def _first_optimizer(self) -> Any:
            optimizers = self.optimizers()
            first = optimizers[0] if isinstance(optimizers, list) else optimizers
            return getattr(first, "optimizer", first)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if program.none_at:
                self.batch_outputs.append((sorted(outputs), _number(outputs["loss"]) if "loss" in outputs else None))
            if program.log_in_batch_end:
                self.log("batch_end_value", float(batch_idx))
            if batch_idx == program.stop_at_batch and self.trainer.current_epoch == 0:
                self.trainer.should_stop = True

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("test_loss", self._loss(batch))

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch[0])

        def configure_optimizers(self):
            if program.manual:
                return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.05)]
            make = torch.optim.Adam if program.optimizer == "adam" else torch.optim.SGD
            optimizer = make(self._groups(), lr=0.1)
            if program.scheduler is None:
                return optimizer
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": program.scheduler}}

        def _groups(self) -> Any:
            if program.param_groups == 1:
                return self.parameters()
            weight, bias = self.layer.weight, self.layer.bias
            return [{"params": [weight], "momentum": 0.9}, {"params": [bias], "lr": 0.05, "momentum": 0.5}]

        def train_dataloader(self):
            return DataLoader(DATASETS[program.data](), batch_size=BATCH, shuffle=program.random)

        def _eval_loaders(self) -> Any:
            loaders = [DataLoader(Samples(1), batch_size=BATCH), DataLoader(Samples(2), batch_size=BATCH)]
            return loaders[: program.eval_loaders] if program.eval_loaders > 1 else loaders[0]

        val_dataloader = test_dataloader = predict_dataloader = _eval_loaders

    return Net


def _number(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def metrics_of(mapping: Any) -> dict[str, float]:
    return {key: _number(value) for key, value in sorted(dict(mapping).items())}


def recorder_class(base: type, calls: list[Any]) -> type:
    """A callback writing every hook Lightning 2.6 calls on a callback into ``calls``."""

    class Recorder(base):  # type: ignore[misc, valid-type]
        pass

    def make(name: str) -> Any:
        def hook(self, trainer, *args, **kwargs):
            indices = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
            calls.append(f"{name}{tuple(indices)}" if indices else name)
            if name in READ_AT:
                read = (metrics_of(trainer.callback_metrics), metrics_of(trainer.logged_metrics))
                lrs = [group["lr"] for optimizer in trainer.optimizers for group in optimizer.param_groups]
                calls.append(("read", trainer.global_step, *read, lrs))

        return hook

    for name in CALLBACK_HOOKS:
        setattr(Recorder, name, make(name))
    return Recorder


@dataclass
class Outcome:
    calls: list[Any] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)  # after each stage: callback, logged, progress bar
    csv_rows: list[dict[str, str]] = field(default_factory=list)
    checkpoint: dict[str, Any] = field(default_factory=dict)  # keys and global_step
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    lrs: list[float] = field(default_factory=list)
    batch_outputs: list[Any] = field(default_factory=list)
    global_step: int = 0
    current_epoch: int = 0


def make_trainer(framework: str, root: Path, program: Program, calls: list[Any], **settings: Any) -> Any:
    L = api(framework)
    callbacks: list[Any] = [recorder_class(L.Callback, calls)()]
    if program.checkpoint_monitor is not None:
        callbacks.append(L.ModelCheckpoint(dirpath=root / "ckpts", monitor=program.checkpoint_monitor))
    if program.early_stopping:
        callbacks.append(L.EarlyStopping(monitor="train_loss", mode="max", patience=0))
    if program.lr_monitor is not None:
        interval = None if program.lr_monitor == "scheduler" else program.lr_monitor
        callbacks.append(L.LearningRateMonitor(logging_interval=interval, log_momentum=True, log_weight_decay=True))
    arguments = dict(
        accelerator="cpu",
        devices=1,
        logger=L.CSVLogger(root, name="logs", version=0),
        enable_checkpointing=program.checkpoint_monitor is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=callbacks,
    )
    return L.Trainer(**{**arguments, **settings})


def run(
    framework: str,
    program: Program,
    root: Path,
    stages: tuple[str, ...] = ("fit",),
    ckpt_path: str | None = None,
    seed: bool = True,
    **settings: Any,
) -> Outcome:
    """Run ``program``'s ``stages`` with one Trainer of ``framework`` built with ``settings``
    (``seed=False``: the global generators as the process left them, a second Trainer's)."""
    L = api(framework)
    out = Outcome()
    if seed:
        L.seed(0, workers=False)
    model = module_class(L.Module, program)()
    trainer = make_trainer(framework, root, program, out.calls, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for stage in stages:
            if stage == "fit":
                trainer.fit(model, ckpt_path=ckpt_path)
            elif stage == "predict":
                trainer.predict(model)
            else:
                getattr(trainer, stage)(model, verbose=False)
            out.calls.append(f"--- {stage} done")
            out.metrics[stage] = {
                "callback": metrics_of(trainer.callback_metrics),
                "logged": metrics_of(trainer.logged_metrics),
                "progress_bar": metrics_of(trainer.progress_bar_metrics),
            }
        if "fit" in stages:
            trainer.save_checkpoint(root / "end.ckpt")
            saved = torch.load(root / "end.ckpt", weights_only=False)
            out.checkpoint = {"keys": sorted(saved), "global_step": saved["global_step"], "epoch": saved["epoch"]}
    for logger in trainer.loggers:
        logger.save()
    out.csv_rows = csv_rows(root / "logs" / "version_0" / "metrics.csv")
    out.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out.lrs, out.global_step, out.current_epoch = model.lrs, trainer.global_step, trainer.current_epoch
    out.batch_outputs = model.batch_outputs
    return out


def csv_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as file:
        return [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(file)]


def differences(
    ours: Outcome, theirs: Outcome, *, ignore_checkpoint_keys: tuple[str, ...] = (), checkpoint_epoch: bool = True
) -> dict[str, Any]:
    """What differs between two outcomes, by field (empty when they agree; weights bit for bit);
    ``checkpoint_epoch=False``: not the checkpoint's epoch."""
    found: dict[str, Any] = {}
    for name in ("calls", "metrics", "csv_rows", "lrs", "batch_outputs", "global_step", "current_epoch"):
        mine, other = getattr(ours, name), getattr(theirs, name)
        if not _same(mine, other):
            found[name] = (mine, other)
    kept = [
        {
            "keys": [k for k in o.checkpoint.get("keys", []) if k not in ignore_checkpoint_keys],
            "global_step": o.checkpoint.get("global_step"),
            "epoch": o.checkpoint.get("epoch") if checkpoint_epoch else None,
        }
        for o in (ours, theirs)
    ]
    if kept[0] != kept[1]:
        found["checkpoint"] = tuple(kept)
    if ours.weights.keys() != theirs.weights.keys() or any(
        not torch.equal(ours.weights[k], theirs.weights[k]) for k in ours.weights
    ):
        found["weights"] = (ours.weights, theirs.weights)
    return found


def _same(a: Any, b: Any) -> bool:
    """Equal, floats to a relative 1e-6, strings of floats too (a test that needs the last bit
    compares the values itself: tests/trainer/test_differential_epoch_means.py)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str) and a != b:
        try:
            return _same(float(a), float(b))
        except ValueError:
            return False
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return bool(a == b)
