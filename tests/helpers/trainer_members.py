"""What a Lightning program reads of its Trainer, recorded under Lightning 2.6 and under trainmesh.

One small program (``Linear(4, 1)``, SGD; a map-style or iterable train set; one or two
validation loaders) whose callback, at each hook, writes down the Trainer members Lightning 2.6
defines for a program to read about its run: the devices (``num_devices``, ``device_ids``,
``num_nodes``, ``node_rank``, ``distributed_sampler_kwargs``, ``accelerator``), the precision
plugin and ``scaler``, the callbacks of a kind, ``interrupted`` and ``received_sigterm``, where the
fit loop is (``is_last_batch``, ``num_sanity_val_batches``, ``enable_validation``,
``estimated_stepping_batches``, which ``configure_optimizers`` reads too, as a OneCycleLR does), the
loaders (``train_dataloader``, ``val_dataloaders``, ``test_dataloaders``, ``predict_dataloaders``:
type, length, sampler, batch size) and torch's flags (anomaly mode, ``cudnn.benchmark``). The
module records when each ``*_dataloader()`` is asked for and the samples each training step gets.
``run(framework, ...)`` returns the record; a test compares the two frameworks' records.

Importable by spawned processes (the ddp test runs it under ``ddp_spawn``).
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

SAMPLES, BATCH = 32, 4  # 8 batches an epoch on one process


class Samples(Dataset):
    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x, self.y = torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], index


class Stream(IterableDataset):
    def __iter__(self):
        samples = Samples(0)
        return (samples[i] for i in range(SAMPLES))


def classes(framework: str) -> Any:
    """(the package, its callbacks, its ``core`` (LightningModule), its ``is_shared_filesystem``)."""
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks, core
        from lightning.pytorch.utilities import is_shared_filesystem

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        return pl, callbacks, core, is_shared_filesystem
    import trainmesh as tm
    from trainmesh import callbacks, core
    from trainmesh.utilities import is_shared_filesystem

    return tm, callbacks, core, is_shared_filesystem


def loader_summary(loaders: Any) -> Any:
    """What a program may read of a loader the Trainer holds: its type, length, sampler and batch size."""
    if loaders is None:
        return None
    if isinstance(loaders, (list, tuple)):
        return [loader_summary(loader) for loader in loaders]
    length = len(loaders) if not isinstance(loaders.dataset, IterableDataset) else None
    sampler = type(loaders.sampler).__name__ if not isinstance(loaders.dataset, IterableDataset) else None
    return (type(loaders).__name__, length, sampler, loaders.batch_size)


def _number(value: Any) -> Any:
    return "inf" if isinstance(value, float) and math.isinf(value) else value


def read_members(trainer: Any) -> dict[str, Any]:
    """The members that describe the run (read once per stage, at setup)."""
    plugin = trainer.precision_plugin
    return {
        "num_devices": trainer.num_devices,
        "device_ids": trainer.device_ids,
        "num_nodes": trainer.num_nodes,
        "node_rank": trainer.node_rank,
        "distributed_sampler_kwargs": trainer.distributed_sampler_kwargs,
        "accelerator": type(trainer.accelerator).__name__,
        "precision_plugin": (type(plugin).__name__, plugin.precision),
        "scaler": type(trainer.scaler).__name__ if trainer.scaler is not None else None,
        "checkpoint_callbacks": [type(c).__name__ for c in trainer.checkpoint_callbacks],
        "early_stopping_callbacks": [type(c).__name__ for c in trainer.early_stopping_callbacks],
        "progress_bar_callback": trainer.progress_bar_callback is not None,
        "interrupted": trainer.interrupted,
        "received_sigterm": trainer.received_sigterm,
        "reload_dataloaders_every_n_epochs": trainer.reload_dataloaders_every_n_epochs,
        "barebones": trainer.barebones,
    }


def read_parallel_strategy(strategy: Any) -> dict[str, Any]:
    """What programs read on Lightning's ParallelStrategy (under ddp; its single-device strategy
    has none of these)."""
    return {
        "distributed_sampler_kwargs": strategy.distributed_sampler_kwargs,
        "parallel_devices": [str(device) for device in strategy.parallel_devices],
        "process_group_backend": strategy.process_group_backend,
        "lightning_module": type(strategy.lightning_module).__name__,
        "num_processes": strategy.num_processes,
    }


def read_strategy_plugins(strategy: Any, pl_module: Any) -> dict[str, Any]:
    """What programs read of the strategy's plugins and module during fit (both strategies), and under
    ddp its cluster environment and timeout (``trainer.strategy.cluster_environment.global_rank()``)."""
    read = {
        "checkpoint_io": type(strategy.checkpoint_io).__name__,
        "precision_plugin": type(strategy.precision_plugin).__name__,
        "accelerator": type(strategy.accelerator).__name__,
        "model": type(strategy.model).__name__,
        "model_is_module": strategy.model is pl_module,
        "root_device": str(strategy.root_device),
    }
    if type(strategy).__name__ == "SingleDeviceStrategy":  # Lightning's has no cluster environment
        return {**read, "launcher": strategy.launcher}
    env = strategy.cluster_environment
    return {
        **read,
        "cluster_environment": type(env).__name__,
        "places": (env.global_rank(), env.world_size(), env.local_rank(), env.node_rank()),
        "main_address": env.main_address,
        "main_port": type(env.main_port).__name__,
        "creates_processes_externally": env.creates_processes_externally,
        "timeout": strategy._timeout,
        "launcher": (strategy.launcher is not None, strategy.launcher.is_interactive_compatible),
        "layer_sync": strategy._layer_sync,
    }


def recorder(framework: str, events: list[Any], shared_filesystem: Path | None = None) -> Any:
    pl, _, _, is_shared_filesystem = classes(framework)

    class Recorder(pl.Callback):
        def setup(self, trainer, pl_module, stage):
            events.append(("setup", stage, read_members(trainer)))
            if shared_filesystem is not None and stage == "fit":
                own = shared_filesystem / f"rank{trainer.global_rank}"
                own.mkdir(parents=True, exist_ok=True)
                shared = is_shared_filesystem(trainer.strategy, shared_filesystem)
                events.append(("is_shared_filesystem", shared, is_shared_filesystem(trainer.strategy, own)))
                events.append(("strategy", read_parallel_strategy(trainer.strategy)))

        def on_fit_start(self, trainer, pl_module):
            events.append(("on_fit_start", trainer.enable_validation, torch.is_anomaly_enabled()))

        def on_sanity_check_start(self, trainer, pl_module):
            events.append(("on_sanity_check_start", [_number(n) for n in trainer.num_sanity_val_batches]))

        def on_train_start(self, trainer, pl_module):
            events.append(("strategy_plugins", read_strategy_plugins(trainer.strategy, pl_module)))
            events.append(
                (
                    "on_train_start",
                    _number(trainer.estimated_stepping_batches),
                    loader_summary(trainer.train_dataloader),
                    loader_summary(trainer.val_dataloaders),
                    trainer.enable_validation,
                    torch.is_anomaly_enabled(),
                    torch.backends.cudnn.benchmark,
                )
            )

        def on_train_epoch_start(self, trainer, pl_module):
            events.append(("on_train_epoch_start", trainer.current_epoch, trainer.is_last_batch))

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            events.append(("on_train_batch_start", batch_idx, trainer.is_last_batch))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            events.append(("on_train_batch_end", batch_idx, trainer.is_last_batch))

        def on_validation_start(self, trainer, pl_module):
            events.append(("on_validation_start", loader_summary(trainer.val_dataloaders)))

        def on_train_epoch_end(self, trainer, pl_module):
            events.append(("on_train_epoch_end", trainer.is_last_batch))

        def on_fit_end(self, trainer, pl_module):
            events.append(("on_fit_end", trainer.interrupted, torch.is_anomaly_enabled(), trainer.is_last_batch))

        def on_test_start(self, trainer, pl_module):
            events.append(("on_test_start", loader_summary(trainer.test_dataloaders)))

        def on_predict_start(self, trainer, pl_module):
            events.append(("on_predict_start", loader_summary(trainer.predict_dataloaders)))

    return Recorder()


def call_logger(framework: str, events: list[Any]) -> Any:
    """A program's own Logger without ``@rank_zero_only``: records each call the Trainer makes on this
    rank (Lightning's Trainer calls a logger on every rank; its own loggers restrict themselves)."""
    if framework == "lightning":
        from lightning.pytorch.loggers import Logger
    else:
        from trainmesh.loggers import Logger

    class CallLogger(Logger):
        name, version = "calls", 0

        def log_metrics(self, metrics, step=None):
            events.append(("log_metrics", step, sorted(metrics)))

        def log_hyperparams(self, params, *args, **kwargs):
            events.append(("log_hyperparams", sorted(params)))

        def log_graph(self, model, input_array=None):
            events.append(("log_graph", type(model).__name__))

        def save(self):
            events.append(("save",))

        def finalize(self, status):
            events.append(("finalize", status))

    return CallLogger()


def module(
    framework: str,
    events: list[Any],
    *,
    data: str = "map",
    val_loaders: int = 1,
    onecycle: bool = False,
    log: bool = False,
    local_head: bool = False,
) -> Any:
    _, _, core, _ = classes(framework)

    class Net(core.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            if log:
                self.save_hyperparameters({"lr": 0.1})
            if local_head:  # kept out of DDP's sync by torch's own name list: each rank's own values
                self.local = torch.nn.Linear(4, 1)
                self.register_buffer("seen", torch.zeros(()))
                names = ["local.weight", "local.bias", "seen"]
                torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(self, names)

        def training_step(self, batch, batch_idx):
            events.append(("training_step", batch_idx, batch[2].tolist()))
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if local_head:
                self.seen += batch[0].sum()
                loss = loss + torch.nn.functional.mse_loss(self.local(batch[0]), batch[1])
            if log:
                self.log("loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            if log:
                self.log("val", self.layer(batch[0]).sum())

        def test_step(self, batch, batch_idx):
            if log:
                self.log("test", self.layer(batch[0]).sum(), on_step=True)

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            if not onecycle:
                return optimizer
            # The common use: a schedule as long as the run (read here, it asks for the loader now).
            total = self.trainer.estimated_stepping_batches
            events.append(("configure_optimizers", _number(total)))
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=int(total))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        def train_dataloader(self):
            events.append(("train_dataloader", self.trainer.current_epoch))
            if data == "own_sampler":  # the program splits the data itself (use_distributed_sampler=False)
                rank, world = self.trainer.global_rank, self.trainer.world_size
                sampler = DistributedSampler(Samples(0), num_replicas=world, rank=rank, shuffle=True, seed=3)
                return DataLoader(Samples(0), batch_size=BATCH, sampler=sampler)
            return DataLoader(Stream() if data == "stream" else Samples(0), batch_size=BATCH, shuffle=data == "shuffle")

        def val_dataloader(self):
            events.append(("val_dataloader", self.trainer.current_epoch))
            loaders = [DataLoader(Samples(1), batch_size=BATCH), DataLoader(Samples(2), batch_size=2 * BATCH)]
            return loaders[:val_loaders] if val_loaders > 1 else loaders[0]

        def test_dataloader(self):
            return DataLoader(Samples(3), batch_size=BATCH)

        def predict_dataloader(self):
            return DataLoader(Samples(4), batch_size=2 * BATCH)

    return Net()


def run(
    framework: str,
    root: Path,
    *,
    stages: tuple[str, ...] = ("fit",),
    data: str = "map",
    val_loaders: int = 1,
    onecycle: bool = False,
    callbacks: tuple[str, ...] = (),
    shared_filesystem: bool = False,
    loggers: bool = False,
    local_head: bool = False,
    **settings: Any,
) -> dict[str, Any]:
    """Run the program's ``stages`` under ``framework``; the record, and the trained weights
    (``shared_filesystem``: the callback asks ``is_shared_filesystem`` at fit's setup; ``loggers``: the
    module logs, to a logger of the program's own that records its calls, a CSVLogger (``root/csv``)
    and a TensorBoardLogger (``root/tb``))."""
    pl, cbs, _, _ = classes(framework)
    pl.seed_everything(0, workers=False)
    events: list[Any] = []
    extra = {
        "checkpoint": lambda: cbs.ModelCheckpoint(dirpath=root / "ckpts"),
        "early_stopping": lambda: cbs.EarlyStopping(monitor="missing", check_on_train_epoch_end=False, strict=False),
        "lr_monitor": lambda: cbs.LearningRateMonitor(),
    }
    arguments: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing="checkpoint" in callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[recorder(framework, events, root / "shared" if shared_filesystem else None)]
        + [extra[name]() for name in callbacks],
    )
    if loggers:
        own = pl.loggers  # the package's loggers module (Lightning's, or trainmesh's)
        arguments["logger"] = [
            call_logger(framework, events),
            own.CSVLogger(root, name="csv"),
            own.TensorBoardLogger(root, name="tb"),
        ]
    arguments.update(settings)
    model = module(
        framework, events, data=data, val_loaders=val_loaders, onecycle=onecycle, log=loggers, local_head=local_head
    )
    trainer = pl.Trainer(**arguments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for stage in stages:
            if stage == "fit":
                trainer.fit(model)
            elif stage == "predict":
                trainer.predict(model)
            else:
                getattr(trainer, stage)(model, verbose=False)
    events.append(("after", trainer.interrupted, loader_summary(trainer.train_dataloader)))
    # After a test or predict, Lightning's fit data is the module again: the estimate asks its train_dataloader
    events.append(("after estimate", _number(trainer.estimated_stepping_batches)))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"events": events, "weights": weights, "rank": trainer.global_rank}
