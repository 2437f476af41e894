"""Small programs for what Lightning 1.x's published examples use and trainmesh ran differently, run under
pytorch-lightning 1.9.5 by ``record_lightning_1_9_examples.py`` (``trainmesh`` standing for 1.9.5's classes)
and under trainmesh by ``tests/trainer/test_lightning1_examples.py``; each returns what it measured, as data.

No ``from __future__ import annotations``: LightningCLI reads the annotations of ``__init__`` as objects.
"""

import os
import tempfile
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import BackboneFinetuning, BaseFinetuning

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _dataset(n: int = 32) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


def _weights(module: nn.Module) -> dict:
    return {k: v.detach().flatten().tolist() for k, v in module.state_dict().items()}


class Backboned(tm.Module):
    """A backbone (linear, batch norm) and a head; Adam over what is trainable, MultiStepLR."""

    def __init__(self, lr: float = 0.01, batch_size: int = 8) -> None:
        super().__init__()
        self.lr, self.batch_size = lr, batch_size
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=self.lr)
        return [optimizer], [torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1)]

    def train_dataloader(self):
        return DataLoader(_dataset(), batch_size=self.batch_size)


class Milestones(BaseFinetuning):
    """computer_vision_fine_tuning.py's callback: 1.x's ``finetune_function(..., opt_idx)``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = []

    def freeze_before_training(self, pl_module):
        self.freeze(modules=pl_module.backbone, train_bn=False)

    def finetune_function(self, pl_module, epoch, optimizer, opt_idx):
        if epoch == 1:
            self.unfreeze_and_add_param_group(modules=pl_module.backbone, optimizer=optimizer, train_bn=False)
        self.seen.append([epoch, opt_idx, [group["lr"] for group in optimizer.param_groups]])


class Backbone1x(BackboneFinetuning):
    """A 1.x subclass of BackboneFinetuning handing its ``opt_idx`` on to ``super()``."""

    def __init__(self) -> None:
        super().__init__(unfreeze_backbone_at_epoch=1)
        self.seen = []

    def finetune_function(self, pl_module, epoch, optimizer, opt_idx):
        super().finetune_function(pl_module, epoch, optimizer, opt_idx)
        self.seen.append([epoch, opt_idx, [group["lr"] for group in optimizer.param_groups]])


def finetune_opt_idx() -> dict:
    """1.x's ``finetune_function(pl_module, epoch, optimizer, opt_idx)`` overrides, of ``BaseFinetuning``
    and of ``BackboneFinetuning`` (calling ``super()`` with ``opt_idx``), over 3 epochs."""
    found = {}
    for name, make in (("base", Milestones), ("backbone", Backbone1x)):
        tm.seed_everything(0)
        model, callback = Backboned(), make()
        trainer = tm.Trainer(max_epochs=3, callbacks=[callback], enable_checkpointing=False, **QUIET)
        trainer.fit(model)
        found[name] = {"seen": callback.seen, "global_step": trainer.global_step, "weights": _weights(model)}
    return found


class CLIModel(Backboned):
    """A model LightningCLI builds (``--model.lr``)."""


@contextmanager
def _inside(folder):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def cli_lightning1_arguments() -> dict:
    """``LightningCLI(save_config_overwrite=True, description=, env_prefix=, env_parse=True, run=False)``
    (1.x's arguments) built twice in one folder: the Trainer's max_epochs read from the environment, the
    parser's description, and a second fit writing config.yaml over the first."""
    from trainmesh.cli import LightningCLI

    found = {}
    with tempfile.TemporaryDirectory() as root, _inside(root):
        os.environ["EXAMPLE_TRAINER__MAX_EPOCHS"] = "2"
        try:
            for run in ("first", "second"):
                tm.seed_everything(0)
                cli = LightningCLI(
                    CLIModel,
                    save_config_overwrite=True,
                    description="an example",
                    env_prefix="EXAMPLE",
                    env_parse=True,
                    run=False,
                    seed_everything_default=0,
                    trainer_defaults=dict(QUIET, enable_checkpointing=False),
                    args=["--model.lr=0.05", "--trainer.default_root_dir=" + root],
                )
                cli.trainer.fit(cli.model)
                found[run] = {
                    "description": cli.parser.description,
                    "max_epochs": cli.trainer.max_epochs,
                    "global_step": cli.trainer.global_step,
                    "lr": cli.model.lr,
                    "config_written": os.path.isfile(os.path.join(root, "config.yaml")),
                    "weights": _weights(cli.model),
                }
        finally:
            del os.environ["EXAMPLE_TRAINER__MAX_EPOCHS"]
    return found


def devices_none() -> dict:
    """mnist-hello-world's ``Trainer(accelerator="auto", devices=None)`` (1.x's default devices: the
    accelerator's, one CPU), and ``accelerator=None`` (1.x's default accelerator)."""
    found = {}
    for accelerator in ("auto", None):
        tm.seed_everything(0)
        model = Backboned()
        trainer = tm.Trainer(accelerator=accelerator, devices=None, max_epochs=1, enable_checkpointing=False, **QUIET)
        trainer.fit(model)
        found[str(accelerator)] = {
            "num_devices": trainer.num_devices,
            "device": str(model.device),
            "global_step": trainer.global_step,
            "weights": _weights(model),
        }
    return found


def cli_tune() -> dict:
    """1.9's ``LightningCLI`` subcommand ``tune`` (``python main.py tune --trainer.auto_lr_find true``):
    ``trainer.tune`` with ``--lr_find_kwargs``, then with ``--trainer.auto_scale_batch_size``: the learning
    rate and batch size written onto the model, and the weights (the finders restore them)."""
    from trainmesh.cli import LightningCLI

    found = {}
    with tempfile.TemporaryDirectory() as root, _inside(root):
        for name, option in (("lr", "--trainer.auto_lr_find=true"), ("batch", "--trainer.auto_scale_batch_size=power")):
            tm.seed_everything(0)
            args = ["tune", option, "--trainer.default_root_dir=" + root, "--seed_everything=0"]
            args += ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
            args += ['--lr_find_kwargs={"num_training": 30}', '--scale_batch_size_kwargs={"steps_per_trial": 2}']
            cli = LightningCLI(CLIModel, save_config_callback=None, args=args)
            found[name] = {"lr": cli.model.lr, "batch_size": cli.model.batch_size, "weights": _weights(cli.model)}
    return found


class _Sampled(torch.utils.data.IterableDataset):
    """reinforce_learn_Qnet.py's RLDataset: each pass draws its samples with NumPy's generator."""

    def __iter__(self):
        import numpy as np

        rows = _dataset(16).tensors
        yield from ((rows[0][i], rows[1][i]) for i in np.random.choice(16, 8, replace=False))


class Playing(Backboned):
    """A training step that draws from NumPy's generator too (the RL example's epsilon-greedy agent)."""

    def training_step(self, batch, batch_idx):
        import numpy as np

        self.played.append(float(np.random.random()))
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(_Sampled(), batch_size=4)


def dp_on_cpu_seeds_again() -> dict:
    """reinforce_learn_Qnet.py on CPU: ``seed_everything(0)``, draws of the program's own (its replay
    buffer's warm start), then ``Trainer(accelerator="cpu", strategy="dp")``, which 1.9.5 ran as ddp on
    one process: the generators are seeded again as the fit sets up, so the samples drawn are the seed's."""
    import numpy as np

    tm.seed_everything(0)
    np.random.random(50)
    model = Playing()
    model.played = []
    trainer = tm.Trainer(accelerator="cpu", devices=1, strategy="dp", max_epochs=2, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {"played": model.played, "global_step": trainer.global_step, "weights": _weights(model)}


def _counting_loops():
    """kfold.py's shape without its Trainer: an outer loop over folds with a connected inner loop, each
    hook call written down, a ``StopIteration`` ending the inner loop, ``replace`` by class."""
    from trainmesh.loops import Loop

    shared: list = []

    class Inner(Loop):
        def __init__(self, steps: int) -> None:
            super().__init__()
            self.steps, self.i, self.calls = steps, 0, shared  # one list across replaced loops

        @property
        def done(self):
            return self.i >= self.steps

        def reset(self):
            self.calls.append("inner.reset")
            self.i = 0

        def advance(self, fold):
            self.calls.append(f"inner.advance {fold} {self.i}")
            self.i += 1
            if fold == 1 and self.i == 2:
                raise StopIteration

        def on_run_end(self):
            return self.i

        def on_save_checkpoint(self):
            return {"i": self.i}

        def on_load_checkpoint(self, state_dict):
            self.calls.append(f"inner.load {state_dict}")

    class Folds(Loop):
        def __init__(self, folds: int) -> None:
            super().__init__()
            self.folds, self.fold, self.calls, self.ran = folds, 0, [], []

        @property
        def done(self):
            return self.fold >= self.folds

        def connect(self, inner=None):
            self.inner = inner

        def reset(self):
            self.calls.append("reset")

        def on_run_start(self, *args):
            self.calls.append(f"on_run_start {args}")

        def on_advance_start(self, *args):
            self.calls.append(f"on_advance_start {self.fold}")

        def advance(self, *args):
            self.ran.append(self.inner.run(self.fold))
            self.fold += 1

        def on_advance_end(self):
            self.calls.append(f"on_advance_end {self.fold} restarting={self.restarting}")
            self.replace(inner=Inner)  # a new inner loop, made with the old one's steps

        def on_run_end(self):
            return list(self.ran)

        def on_save_checkpoint(self):
            return {"fold": self.fold}

    return Inner, Folds


def custom_loop_run() -> dict:
    """1.x's ``Loop`` run by a program itself (``loop.run()``): the hooks' order, ``replace``, ``skip``,
    ``state_dict`` / ``load_state_dict`` and ``restarting``."""
    inner_class, folds_class = _counting_loops()
    folds = folds_class(3)
    folds.connect(inner=inner_class(3))
    folds.trainer = "a trainer"  # given to the sub-loops too
    ran = folds.run("data")
    state = folds.state_dict()
    again = folds_class(3)
    again.connect(inner=inner_class(3))
    again.load_state_dict(state)
    return {
        "ran": ran,
        "calls": folds.calls,
        "inner_calls": folds.inner.calls,
        "inner_trainer": folds.inner.trainer,
        "state": state,
        "loaded": again.inner.calls,
        "restarting": [again.restarting, again.inner.restarting],
    }


def _yielding_loop() -> type:
    """yielding_training_step.py's ``YieldLoop`` pattern: an ``OptimizerLoop`` subclass that gets the
    ``training_step`` generator once per batch and gives each optimizer's closure its next loss."""
    import inspect
    from functools import partial

    from trainmesh.loops import OptimizerLoop
    from trainmesh.loops.optimization.optimizer_loop import ClosureResult

    class Yielding(OptimizerLoop):
        def __init__(self) -> None:
            super().__init__()
            self._generator = None

        def connect(self, **kwargs):
            raise NotImplementedError(f"{type(self).__name__} does not connect any child loops.")

        def on_run_start(self, optimizers, kwargs):
            super().on_run_start(optimizers, kwargs)
            assert inspect.isgeneratorfunction(self.trainer.lightning_module.training_step)
            step_kwargs = self._build_kwargs(kwargs, 0, hiddens=None)
            self._generator = self.trainer.strategy.training_step(*step_kwargs.values())

        def _make_step_fn(self, *_):
            return partial(self._next_loss, self._generator)

        def _next_loss(self, generator):
            self.trainer.lightning_module._current_fx_name = "training_step"  # as the example, for self.log
            output = next(generator)
            self.trainer.strategy.post_training_step()
            model_output = self.trainer._call_lightning_module_hook("training_step_end", output)
            strategy_output = self.trainer._call_strategy_hook("training_step_end", output)
            output = strategy_output if model_output is None else model_output
            return ClosureResult.from_training_step_output(output, self.trainer.accumulate_grad_batches)

    return Yielding


class Adversaries(tm.Module):
    """A generator and a discriminator; ``training_step`` yields the generator's loss, then the
    discriminator's, reusing the fake batch made once (and its random draw)."""

    def __init__(self) -> None:
        super().__init__()
        self.make, self.judge = nn.Linear(4, 4), nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx, optimizer_idx=0):
        x, _ = batch
        fake = self.make(torch.randn_like(x))
        g_loss = (self.judge(fake) - 1).pow(2).mean()
        self.log("g_loss", g_loss)
        self.seen.append([batch_idx, optimizer_idx, float(g_loss.detach())])
        yield g_loss
        d_loss = ((self.judge(x) - 1).pow(2).mean() + self.judge(fake.detach()).pow(2).mean()) / 2
        self.log("d_loss", d_loss)
        self.seen.append([batch_idx, "d", float(d_loss.detach())])
        yield d_loss

    def configure_optimizers(self):
        return [torch.optim.SGD(self.make.parameters(), lr=0.05), torch.optim.Adam(self.judge.parameters())], []

    def train_dataloader(self):
        return DataLoader(_dataset(), batch_size=8)


def yielding_optimizer_loop() -> dict:
    """yielding_training_step.py: a generator ``training_step`` run by an ``OptimizerLoop`` subclass connected
    with ``trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=...)``, two optimizers, 2 epochs."""
    tm.seed_everything(0)
    model = Adversaries()
    trainer = tm.Trainer(max_epochs=2, enable_checkpointing=False, **QUIET)
    trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=_yielding_loop()())
    trainer.fit(model)
    return {
        "seen": model.seen,
        "global_step": trainer.global_step,
        "callback_metrics": {k: float(v) for k, v in sorted(trainer.callback_metrics.items())},
        "weights": _weights(model),
    }


class Searched(tm.Module):
    """A regression tutorial's ``trainer.tune`` under ``auto_lr_find``: shuffled train and validation loaders
    (each validation pass draws the global generator), a ``learning_rate`` attribute for the suggestion."""

    def __init__(self) -> None:
        super().__init__()
        self.learning_rate, self.events = 0.05, []
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        self.events.append(["train", self.trainer.global_step, batch_idx])
        return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.events.append(["val", self.trainer.global_step, batch_idx])
        self.log("val_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


def tune_auto_lr_find() -> dict:
    """``Trainer(auto_lr_find=True)`` then ``trainer.tune(model, train, val)``: the steps of the search (1.9.5
    validates once before its first training batch), its losses, the suggestion, and the fit after it."""
    tm.seed_everything(3)
    model = Searched()
    loaders = [DataLoader(_dataset(16), batch_size=2, shuffle=True) for _ in range(2)]
    trainer = tm.Trainer(max_epochs=2, auto_lr_find=True, num_sanity_val_steps=0, **QUIET, enable_checkpointing=False)
    found = trainer.tune(model, *loaders)["lr_find"]
    searched, model.events = model.events, []
    trainer.fit(model, *loaders)
    return {
        "search": searched,
        "losses": [float(x) for x in found.results["loss"]],
        "learning_rate": model.learning_rate,
        "fit": model.events,
        "weights": _weights(model),
    }


class NormalRegression(tm.Module):
    """A probabilistic regression (a Normal's mean and scale from one hidden layer), the negative log-likelihood
    its loss: its range test's loss falls unevenly over the rates, where 1.x's and 2.x's suggestions part."""

    def __init__(self) -> None:
        super().__init__()
        self.learning_rate = 0.05
        self.hidden, self.mean, self.scale = nn.Linear(1, 10), nn.Linear(10, 1), nn.Linear(10, 1)

    def training_step(self, batch, batch_idx):
        hidden = torch.sigmoid(self.hidden(batch[0]))
        normal = torch.distributions.Normal(self.mean(hidden), nn.functional.softplus(self.scale(hidden)))
        return -normal.log_prob(batch[1]).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


def tune_lr_suggestion() -> dict:
    """``trainer.tune`` under ``auto_lr_find="learning_rate"``, a 56-step search to its end: the rates and losses
    searched, the suggestion written onto the model and ``suggestion()`` of the returned finder."""
    tm.seed_everything(5)
    generator = torch.Generator().manual_seed(1)
    x = torch.rand(100, 1, generator=generator) * 20 - 10
    y = 1.3 * x + 3 * torch.cos(x * 0.5) + torch.randn(100, 1, generator=generator) * (torch.sin(x * 0.4) + 1)
    model = NormalRegression()
    trainer = tm.Trainer(max_epochs=8, auto_lr_find="learning_rate", **QUIET, enable_checkpointing=False)
    found = trainer.tune(
        model, DataLoader(TensorDataset(x, y), batch_size=16), lr_find_kwargs={"early_stop_threshold": None}
    )
    finder = found["lr_find"]
    return {
        "lrs": [float(v) for v in finder.results["lr"]],
        "losses": [float(v) for v in finder.results["loss"]],
        "learning_rate": model.learning_rate,
        "suggestion": finder.suggestion(),
        "suggestion_skip_5": finder.suggestion(skip_begin=5, skip_end=3),
        "on_a_set_curve": _suggestions_on_a_set_curve(finder),
    }


def _suggestions_on_a_set_curve(finder) -> list:
    """The finder's ``suggestion()`` on a curve set here: the loss falls by 0.2 from step 12 to 13 (rates near
    1e-5) and by 1 from step 30 to 31 (near 0.3); one loss is not finite. Per step the steeper fall is the
    second, per unit of rate the first; the non-finite point shifts 1.9.5's index."""
    lrs = [10 ** (-8 + 8 * i / 39) for i in range(40)]
    losses = [3.0 - 0.2 * (i > 12) - 1.0 * (i > 30) for i in range(40)]
    found = []
    for bad in (None, 20):
        finder.results = {"lr": lrs, "loss": [float("nan") if i == bad else v for i, v in enumerate(losses)]}
        found.append([finder.suggestion(), finder.suggestion(skip_begin=2, skip_end=2)])
    return found


PROGRAMS = {
    "cli_tune": cli_tune,
    "devices_none": devices_none,
    "finetune_opt_idx": finetune_opt_idx,
    "cli_lightning1_arguments": cli_lightning1_arguments,
    "tune_auto_lr_find": tune_auto_lr_find,
    "tune_lr_suggestion": tune_lr_suggestion,
    "custom_loop_run": custom_loop_run,
    "yielding_optimizer_loop": yielding_optimizer_loop,
    "dp_on_cpu_seeds_again": dp_on_cpu_seeds_again,  # last: 1.9.5's ddp leaves its process group
}
