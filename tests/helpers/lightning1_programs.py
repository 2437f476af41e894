"""Small programs written against Lightning 1.x's Trainer names, run under pytorch-lightning 1.9.5 by
``record_lightning_1_9_trainer.py`` (with ``trainmesh`` standing for 1.9.5's classes) and under trainmesh
by ``tests/trainer/test_lightning1_members.py``; each returns what it measured, as data.

No ``from __future__ import annotations`` here: 1.x's argparse reads the annotations of a data module's
``__init__`` as objects.
"""

import argparse
import glob
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import ModelCheckpoint

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}

# Trainer members Lightning 1.8 removed: 1.9.5 raises for each (AttributeError, NotImplementedError).
GRAVEYARD_PROPERTIES = (
    "gpus",
    "root_gpu",
    "tpu_cores",
    "ipus",
    "num_gpus",
    "devices",
    "use_amp",
    "weights_save_path",
    "lightning_optimizers",
    "should_rank_save_checkpoint",
    "validated_ckpt_path",
    "tested_ckpt_path",
    "predicted_ckpt_path",
    "verbose_evaluate",
    "training_type_plugin",
)
GRAVEYARD_METHODS = (
    "run_stage",
    "call_hook",
    "prepare_dataloader",
    "request_dataloader",
    "init_optimizers",
    "convert_to_lightning_optimizers",
    "reset_train_val_dataloaders",
)


def _dataset(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


class Regression(tm.Module):
    """A linear regression whose optimizer reads ``self.lr`` and whose loader reads ``self.batch_size``
    (what 1.x's tuner changes)."""

    def __init__(self, lr: float = 0.05, batch_size: int = 8) -> None:
        super().__init__()
        self.lr, self.batch_size = lr, batch_size
        self.layer = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader(_dataset(), batch_size=self.batch_size)


def _weights(module: nn.Module) -> dict:
    return {k: v.detach().flatten().tolist() for k, v in module.state_dict().items()}


def resume() -> dict:
    """``Trainer(resume_from_checkpoint=...)``: a fit of 4 epochs saving each epoch, and a new model
    resumed from its epoch-1 checkpoint by the 1.x argument."""
    with tempfile.TemporaryDirectory() as root:
        tm.seed_everything(0)
        model = Regression()
        saving = ModelCheckpoint(dirpath=os.path.join(root, "ckpts"), save_top_k=-1, every_n_epochs=1)
        whole = tm.Trainer(max_epochs=4, default_root_dir=root, callbacks=[saving], **QUIET)
        whole.fit(model)
        (path,) = glob.glob(os.path.join(root, "ckpts", "epoch=1*.ckpt"))
        tm.seed_everything(1)
        resumed_model = Regression()
        trainer = tm.Trainer(
            max_epochs=4, default_root_dir=root, resume_from_checkpoint=path, enable_checkpointing=False, **QUIET
        )
        before = trainer.resume_from_checkpoint == path
        trainer.fit(resumed_model)
        return {
            "property_before_fit_is_the_path": before,
            "property_after_fit": trainer.resume_from_checkpoint,
            "global_step": trainer.global_step,
            "current_epoch": trainer.current_epoch,
            "whole_global_step": whole.global_step,
            "weights": _weights(resumed_model),
            "whole_weights": _weights(model),
        }


def tune_lr() -> dict:
    """``Trainer(auto_lr_find=True)`` and ``trainer.tune(model)``: the learning rate written onto ``model.lr``."""
    tm.seed_everything(0)
    model = Regression(lr=0.05)
    trainer = tm.Trainer(auto_lr_find=True, **QUIET, enable_checkpointing=False)
    result = trainer.tune(model)
    finder = result["lr_find"]
    return {
        "keys": sorted(result),
        "model_lr": model.lr,
        "suggestion": finder.suggestion(),
        "lrs": finder.results["lr"],
        "losses": [float(v) for v in finder.results["loss"]],
        "tuning_after": trainer.tuning,
        "global_step_after": trainer.global_step,
        "weights_after": _weights(model),
    }


def tune_batch_size(mode) -> dict:
    """``Trainer(auto_scale_batch_size=mode)`` and ``trainer.tune(model)``: the batch size written onto
    ``model.batch_size``."""
    tm.seed_everything(0)
    model = Regression(batch_size=2)
    trainer = tm.Trainer(auto_scale_batch_size=mode, max_epochs=1, **QUIET, enable_checkpointing=False)
    result = trainer.tune(model)
    return {
        "keys": sorted(result),
        "found": result["scale_batch_size"],
        "model_batch_size": model.batch_size,
        "global_step_after": trainer.global_step,
    }


class TwoLoaders(Regression):
    """Training over a dict (or list) of two train loaders of 8 and 3 batches."""

    def __init__(self, as_list: bool = False) -> None:
        super().__init__()
        self.as_list, self.seen = as_list, []

    def training_step(self, batch, batch_idx):
        parts = batch if self.as_list else [batch["a"], batch["b"]]
        self.seen.append([int(p[0].shape[0]) for p in parts])
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        return nn.functional.mse_loss(self(x), y)

    def train_dataloader(self):
        a = DataLoader(_dataset(64), batch_size=8)
        b = DataLoader(_dataset(20), batch_size=7)
        return [a, b] if self.as_list else {"a": a, "b": b}


def trainloader_mode() -> dict:
    """``Trainer(multiple_trainloader_mode=...)`` with a dict and a list of train loaders."""
    found = {}
    for mode in ("max_size_cycle", "min_size"):
        for as_list in (False, True):
            tm.seed_everything(0)
            model = TwoLoaders(as_list)
            trainer = tm.Trainer(max_epochs=2, multiple_trainloader_mode=mode, enable_checkpointing=False, **QUIET)
            trainer.fit(model)
            found[f"{mode}-{'list' if as_list else 'dict'}"] = {
                "seen": model.seen,
                "global_step": trainer.global_step,
                "weights": _weights(model),
            }
    return found


class TwoOptimizers(Regression):
    def training_step(self, batch, batch_idx, optimizer_idx):
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        first = torch.optim.SGD(self.parameters(), lr=self.lr)
        second = torch.optim.SGD(self.parameters(), lr=self.lr / 2)
        return [{"optimizer": first, "frequency": 2}, {"optimizer": second, "frequency": 1}]


def members() -> dict:
    """The Trainer's 1.x members on CPU, before and after a fit."""
    trainer = tm.Trainer(max_epochs=1, enable_checkpointing=False, **QUIET)
    before = {
        "amp_backend": trainer.amp_backend,
        "data_parallel": trainer.data_parallel,
        "tuning": trainer.tuning,
        "optimizer_frequencies": trainer.optimizer_frequencies,
        "prediction_writer_callbacks": len(trainer.prediction_writer_callbacks),
        "resume_from_checkpoint": trainer.resume_from_checkpoint,
    }
    tm.seed_everything(0)
    trainer.fit(Regression())
    one_optimizer = trainer.optimizer_frequencies
    two = tm.Trainer(max_epochs=1, enable_checkpointing=False, **QUIET)
    two.fit(TwoOptimizers())
    mixed = tm.Trainer(precision="bf16", **QUIET)
    ddp = tm.Trainer(accelerator="cpu", devices=1, strategy="ddp", **QUIET)
    metrics_on_cpu = tm.Trainer(max_epochs=1, move_metrics_to_cpu=True, enable_checkpointing=False, **QUIET)
    tm.seed_everything(0)
    metrics_on_cpu.fit(Regression())
    os.environ["PL_TRAINER_MAX_EPOCHS"], os.environ["PL_TRAINER_LOGGER"] = "3", "False"
    try:
        env = vars(tm.Trainer.match_env_arguments())
    finally:
        del os.environ["PL_TRAINER_MAX_EPOCHS"], os.environ["PL_TRAINER_LOGGER"]
    defaults = tm.Trainer.default_attributes()
    shared = ("max_epochs", "max_steps", "log_every_n_steps", "num_sanity_val_steps")
    return {
        "before_fit": before,
        "optimizer_frequencies_one": one_optimizer,
        "optimizer_frequencies_two": two.optimizer_frequencies,
        "amp_backend_bf16": mixed.amp_backend,
        "data_parallel_ddp": ddp.data_parallel,
        "move_metrics_to_cpu": {k: [str(v.device), float(v)] for k, v in metrics_on_cpu.callback_metrics.items()},
        "match_env_arguments": env,
        "default_attributes": {name: defaults[name] for name in shared},
    }


class ArgparseData(tm.DataModule):
    """A data module a 1.x program builds from its command line."""

    def __init__(
        self,
        data_dir: str = "./data",
        batch_size: int = 32,
        shuffle: bool = True,
        fraction: float = 0.5,
        workers: int | None = None,
        pin: bool = False,
        mixed: bool | None = None,
    ) -> None:
        super().__init__()
        self.data_dir, self.batch_size, self.shuffle, self.fraction = data_dir, batch_size, shuffle, fraction
        self.workers, self.pin, self.mixed = workers, pin, mixed


COMMAND_LINES = (
    [],
    ["--batch_size", "64", "--data_dir", "/tmp/d"],
    ["--shuffle", "false", "--pin"],
    ["--fraction", "0.25", "--workers", "4"],
    ["--mixed", "yes"],
    ["--pin", "--shuffle"],
)


def datamodule_argparse() -> dict:
    """``LightningDataModule.add_argparse_args / parse_argparser / from_argparse_args /
    get_init_arguments_and_types``."""
    parser = ArgparseData.add_argparse_args(argparse.ArgumentParser())
    actions = {
        a.dest: [repr(a.default), getattr(a.type, "__name__", repr(a.type)), a.nargs]
        for a in parser._actions
        if a.dest != "help"
    }
    parses, built = [], []
    for line in COMMAND_LINES:
        args = ArgparseData.parse_argparser(parser.parse_args(line))
        parses.append({k: repr(v) for k, v in sorted(vars(args).items())})
        data = ArgparseData.from_argparse_args(args, data_dir="/override" if "--pin" in line else args.data_dir)
        built.append([data.data_dir, data.batch_size, data.shuffle, data.fraction, data.workers, data.pin, data.mixed])
    flat = ArgparseData.add_argparse_args(argparse.ArgumentParser(), use_argument_group=False)
    types_ = [
        [n, [getattr(t, "__name__", repr(t)) for t in ts], repr(d)]
        for n, ts, d in ArgparseData.get_init_arguments_and_types()
    ]
    return {
        "actions": actions,
        "parses": parses,
        "built": built,
        "flat_parser_dests": sorted(a.dest for a in flat._actions),
        "init_arguments_and_types": types_,
    }


def utilities() -> dict:
    """1.9's utility names 2.0 removed: ``parsing.flatten_dict / str_to_bool*``, ``memory.get_model_size_mb``,
    ``utilities.types``' step protocols, ``utilities.seed``'s functions."""
    from trainmesh.utilities import flatten_dict as top_flatten
    from trainmesh.utilities import memory, parsing, seed
    from trainmesh.utilities import types as step_types

    words = ["y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0", "TRUE", "maybe", "3"]
    protocols = [step_types.TrainingStep, step_types.ValidationStep, step_types.TestStep, step_types.PredictStep]
    answers = {}
    for name, parse in [("str_to_bool", parsing.str_to_bool), ("str_to_bool_or_int", parsing.str_to_bool_or_int)]:
        answers[name] = [repr(_try(parse, w)) for w in words]
    answers["str_to_bool_or_str"] = [repr(parsing.str_to_bool_or_str(w)) for w in words]
    seed.seed_everything(5)
    first = torch.rand(2).tolist()
    torch.rand(3)
    seed.reset_seed()
    again = torch.rand(2).tolist()
    seed.new_seed_everything(6)
    six = torch.rand(1).tolist()
    seed.pl_worker_init_function(1, rank=0)
    worker = torch.rand(1).tolist()
    return {
        **answers,
        "flatten_dict": parsing.flatten_dict({"a": {"b": 1, "c": {"d": 2}}, "e": 3, "b": 4}),
        "top_flatten_dict": top_flatten({"x": {"y": 1}}),
        "model_size_mb": memory.get_model_size_mb(nn.Linear(10, 10)),
        "protocols_regression": [isinstance(Regression(), p) for p in protocols],
        "protocols_linear": [isinstance(nn.Linear(1, 1), p) for p in protocols],
        "reset_seed_repeats": first == again,
        "new_seed_everything_6": six,
        "worker_seeded": worker,
    }


def _try(parse, word):
    try:
        return parse(word)
    except ValueError as error:
        return f"ValueError: {error}"


class GradNorms(Regression):
    def __init__(self) -> None:
        super().__init__()
        self.norms = []

    def log_grad_norm(self, grad_norm_dict):
        self.norms.append({k: float(v) for k, v in grad_norm_dict.items()})
        super().log_grad_norm(grad_norm_dict)


def grad_norm() -> dict:
    """``Trainer(track_grad_norm=2)``: ``LightningModule.log_grad_norm`` called with each step's norms."""
    tm.seed_everything(0)
    model = GradNorms()
    trainer = tm.Trainer(max_epochs=1, track_grad_norm=2, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {
        "calls": len(model.norms),
        "first": model.norms[0],
        "last": model.norms[-1],
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }


PROGRAMS = {
    "resume": resume,
    "tune_lr": tune_lr,
    "tune_batch_size_power": lambda: tune_batch_size(True),
    "tune_batch_size_binsearch": lambda: tune_batch_size("binsearch"),
    "trainloader_mode": trainloader_mode,
    "members": members,
    "datamodule_argparse": datamodule_argparse,
    "utilities": utilities,
    "grad_norm": grad_norm,
}


def resume_after_tune() -> dict:
    """``Trainer(resume_from_checkpoint=..., auto_lr_find=True)``: tune, then fit resumes from the checkpoint."""
    with tempfile.TemporaryDirectory() as root:
        tm.seed_everything(0)
        saving = ModelCheckpoint(dirpath=os.path.join(root, "ckpts"), save_top_k=-1, every_n_epochs=1)
        tm.Trainer(max_epochs=2, default_root_dir=root, callbacks=[saving], **QUIET).fit(Regression())
        (path,) = glob.glob(os.path.join(root, "ckpts", "epoch=0*.ckpt"))
        tm.seed_everything(1)
        model = Regression()
        trainer = tm.Trainer(
            max_epochs=2,
            default_root_dir=root,
            resume_from_checkpoint=path,
            auto_lr_find=True,
            enable_checkpointing=False,
            **QUIET,
        )
        found = trainer.tune(model)["lr_find"]
        path_after_tune = trainer.resume_from_checkpoint == path
        searched, weights_after_tune = [float(v) for v in found.results["loss"]], _weights(model)
        trainer.fit(model)
        return {
            "searched_losses": searched,
            "weights_after_tune": weights_after_tune,
            "lr": model.lr,
            "path_after_tune": path_after_tune,
            "global_step": trainer.global_step,
            "weights": _weights(model),
        }


PROGRAMS["resume_after_tune"] = resume_after_tune


class HundredSamples(Regression):
    """The regression over 100 samples (not a power of two: where the batch-size searches part)."""

    def train_dataloader(self):
        return DataLoader(_dataset(100), batch_size=self.batch_size)


def tune_batch_size_trials(mode) -> dict:
    """``trainer.tune`` with ``auto_scale_batch_size=mode`` and ``scale_batch_size_kwargs``: the sizes found
    with 1, 4 and the default 25 trials, what the fit after trains, and the kwargs dict afterwards."""
    found = {}
    for max_trials in (1, 4, 25):
        tm.seed_everything(0)
        model = HundredSamples(batch_size=2)
        trainer = tm.Trainer(auto_scale_batch_size=mode, max_epochs=1, **QUIET, enable_checkpointing=False)
        kwargs = {"max_trials": max_trials}
        result = trainer.tune(model, scale_batch_size_kwargs=kwargs)
        trainer.fit(model)
        found[str(max_trials)] = {
            "found": result["scale_batch_size"],
            "model_batch_size": model.batch_size,
            "kwargs_after": kwargs,
            "global_step": trainer.global_step,
            "weights": _weights(model),
        }
    return found


PROGRAMS["tune_batch_size_trials_power"] = lambda: tune_batch_size_trials("power")
PROGRAMS["tune_batch_size_trials_binsearch"] = lambda: tune_batch_size_trials("binsearch")


def accumulate_dict() -> dict:
    """``Trainer(accumulate_grad_batches={0: 1, 1: 3})`` (1.x's per-epoch factors): the optimizer steps,
    ``trainer.accumulate_grad_batches`` after each epoch and the weights."""
    tm.seed_everything(0)
    model = HundredSamples(batch_size=8)  # 13 batches an epoch
    factors = []

    class Factors(tm.callbacks.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            factors.append(trainer.accumulate_grad_batches)

    trainer = tm.Trainer(
        max_epochs=3, accumulate_grad_batches={0: 1, 1: 3}, callbacks=[Factors()], enable_checkpointing=False, **QUIET
    )
    trainer.fit(model)
    return {"global_step": trainer.global_step, "factors": factors, "weights": _weights(model)}


PROGRAMS["accumulate_dict"] = accumulate_dict
