"""``LightningCLI`` with Lightning 2.6.6's constructor arguments and parser methods.

The weight sums below were printed by the same program under Lightning 2.6.6 (``lightning.pytorch``
for ``trainmesh``: LightningModule, LightningDataModule, ``lightning.pytorch.cli.LightningCLI``)
with the same arguments; Lightning is not needed to run these tests.
"""

import sys

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import EarlyStopping
from trainmesh.cli import LightningCLI, SaveConfigCallback


class Net(tm.Module):
    def __init__(self, hidden: int = 32, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Wide(Net):
    def __init__(self, hidden: int = 64, lr: float = 0.05, extra: int = 1):
        super().__init__(hidden=hidden, lr=lr)


class Data(tm.DataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.batch_size = batch_size

    def _loader(self, seed, shuffle):
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(seed))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size, shuffle=shuffle)

    def train_dataloader(self):
        return self._loader(0, True)

    def val_dataloader(self):
        return self._loader(1, False)


QUIET = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "1",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def weight_sum(model) -> float:
    return float(torch.cat([p.detach().flatten() for p in model.parameters()]).sum())


@pytest.fixture(autouse=True)
def _no_command_line(monkeypatch):
    # LightningCLI warns when it gets args and the process has command-line arguments (pytest's).
    monkeypatch.setattr(sys, "argv", ["main.py"])
    import trainmesh.seed

    monkeypatch.setattr(trainmesh.seed, "_settings", trainmesh.seed._settings)


def fit(tmp_path, *args, **kwargs) -> LightningCLI:
    root = ["--trainer.default_root_dir", str(tmp_path)]
    return LightningCLI(Net, Data, args=["fit", *QUIET, *root, *args], **kwargs)


def test_fit_trains_as_lightning_and_saves_the_config_in_the_log_folder(tmp_path):
    cli = fit(tmp_path, "--trainer.max_epochs", "2", "--model.hidden", "8", "--seed_everything", "3")
    assert cli.subcommand == "fit" and cli.trainer.current_epoch == 2
    assert weight_sum(cli.model) == pytest.approx(-4.729170322418213, abs=1e-6)  # Lightning 2.6.6
    saved = yaml.safe_load((tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert saved["seed_everything"] == 3 and saved["model"] == {"hidden": 8, "lr": 0.1}
    assert saved["trainer"]["max_epochs"] == 2 and "gpus" not in saved["trainer"]  # 1.x names left out
    assert sum(isinstance(cb, SaveConfigCallback) for cb in cli.trainer.callbacks) == 1


def test_the_optimizer_and_scheduler_options_replace_configure_optimizers(tmp_path):
    args = ["--trainer.max_epochs", "2", "--optimizer", "Adam", "--optimizer.lr", "0.01"]
    with pytest.warns(UserWarning, match="configure_optimizers is replaced"):
        cli = fit(tmp_path, *args, "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "3")
    assert weight_sum(cli.model) == pytest.approx(-1.6647077798843384, abs=1e-6)  # Lightning 2.6.6
    optimizer, scheduler = cli.trainer.optimizers[0], cli.trainer.lr_scheduler_configs[0].scheduler
    assert "betas" in optimizer.param_groups[0] and type(scheduler).__name__ == "StepLR"  # Adam's
    # Without the option the model's own stays; with auto_configure_optimizers=False there is none.
    assert "momentum" in fit(tmp_path, "--trainer.max_epochs", "1").trainer.optimizers[0].param_groups[0]
    with pytest.raises(SystemExit):
        fit(tmp_path, "--optimizer", "Adam", auto_configure_optimizers=False)


def test_trainer_defaults_and_the_seed_default(tmp_path):
    calls = []

    class Recorder(tm.Callback):
        def on_train_start(self, trainer, module):
            calls.append("train_start")

    cli = fit(tmp_path, trainer_defaults={"max_epochs": 3, "callbacks": [Recorder()]}, seed_everything_default=11)
    assert cli.trainer.max_epochs == 3 and calls == ["train_start"]
    assert cli.config.fit.seed_everything == 11
    assert weight_sum(cli.model) == pytest.approx(1.7813525199890137, abs=1e-6)  # Lightning 2.6.6
    # The command line wins over trainer_defaults; seed_everything false: nothing is seeded.
    torch.manual_seed(123)
    cli = fit(tmp_path, "--trainer.max_epochs", "1", "--seed_everything", "false", trainer_defaults={"max_epochs": 3})
    assert cli.trainer.max_epochs == 1 and torch.initial_seed() == 123


def test_run_false_parses_and_builds_only(tmp_path):
    args = ["--trainer.max_epochs", "5", "--model.hidden", "6", "--trainer.accelerator", "cpu"]
    with pytest.warns(UserWarning, match="seed"):  # seed_everything true: seed 0, said once
        cli = LightningCLI(Net, Data, run=False, args=[*args, "--trainer.default_root_dir", str(tmp_path)])
    assert cli.subcommand is None and cli.trainer.max_epochs == 5 and cli.trainer.global_step == 0
    assert cli.model.hparams.hidden == 6 and isinstance(cli.datamodule, Data)
    assert weight_sum(cli.model) == pytest.approx(-2.1807680130004883, abs=1e-6)  # Lightning 2.6.6
    assert not (tmp_path / "lightning_logs").exists()  # nothing ran, nothing written
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)  # what a run=False program does next
    assert cli.trainer.current_epoch == 5


def test_subclass_mode_takes_a_class_path_and_init_args(tmp_path):
    path = f"{Wide.__module__}.Wide"
    cli = fit(tmp_path, "--trainer.max_epochs", "1", "--model", path, "--model.init_args.hidden", "16",
              subclass_mode_model=True)  # fmt: skip
    assert type(cli.model) is Wide and cli.model.hparams.hidden == 16
    assert weight_sum(cli.model) == pytest.approx(0.46356964111328125, abs=1e-6)  # Lightning 2.6.6
    saved = yaml.safe_load((tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert saved["model"]["class_path"] == path and saved["model"]["init_args"]["hidden"] == 16
    # A dict in place of the command line, as Lightning's args accepts; model_class=None: any Module.
    config = {"fit": {"model": {"class_path": path, "init_args": {"extra": 2}}, "trainer": {"max_epochs": 1}}}
    config["fit"]["trainer"].update(accelerator="cpu", devices=1, default_root_dir=str(tmp_path), logger=False)
    cli = LightningCLI(None, Data, args=config)
    assert type(cli.model) is Wide and cli.trainer.current_epoch == 1


def test_save_config_callback_none_kwargs_and_an_existing_file(tmp_path):
    # No logger: log_dir is default_root_dir, the same for every run.
    no_logger = ["--trainer.logger", "false", "--trainer.enable_checkpointing", "false", "--trainer.max_epochs", "1"]
    fit(tmp_path, *no_logger, save_config_callback=None)
    assert not (tmp_path / "config.yaml").exists()
    fit(tmp_path, *no_logger)
    assert (tmp_path / "config.yaml").is_file()
    with pytest.raises(RuntimeError, match="exists already"):  # never overwrites a run's record
        fit(tmp_path, *no_logger)
    fit(tmp_path, *no_logger, "--model.hidden", "3", save_config_kwargs={"overwrite": True})
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["hidden"] == 3
    fit(tmp_path, *no_logger, save_config_kwargs={"config_filename": "run.yaml"})
    assert (tmp_path / "run.yaml").is_file()


def test_parser_kwargs_and_added_arguments(tmp_path):
    (tmp_path / "defaults.yaml").write_text(yaml.safe_dump({"trainer": {"max_epochs": 2}, "data": {"batch_size": 8}}))

    class MyCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(EarlyStopping, "early_stopping")
            parser.set_defaults({"early_stopping.monitor": "val_loss", "early_stopping.patience": 5})
            parser.link_arguments("data.batch_size", "model.hidden")

        def after_fit(self):
            self.after_fit_ran = True

    cli = MyCLI(
        Net,
        Data,
        args=["fit", *QUIET, "--trainer.default_root_dir", str(tmp_path)],
        parser_kwargs={"fit": {"default_config_files": [str(tmp_path / "defaults.yaml")]}},
    )
    assert cli.trainer.current_epoch == 2 and cli.datamodule.batch_size == 8 and cli.after_fit_ran
    assert cli.model.hparams.hidden == 8  # linked from data.batch_size
    [stopper] = [cb for cb in cli.trainer.callbacks if isinstance(cb, EarlyStopping)]
    assert (stopper.monitor, stopper.patience) == ("val_loss", 5)


def test_validate_takes_the_model_arguments_from_the_checkpoint(tmp_path):
    trained = fit(tmp_path, "--trainer.max_epochs", "1", "--model.hidden", "12")
    last = trained.trainer.checkpoint_callback.best_model_path  # the default keeps the newest
    root = ["--trainer.default_root_dir", str(tmp_path)]
    cli = LightningCLI(Net, Data, args=["validate", *QUIET, *root, "--ckpt_path", last])
    assert cli.model.hparams.hidden == 12
    assert all(torch.equal(a, b) for a, b in zip(cli.model.parameters(), trained.model.parameters()))
    assert "val_loss" in cli.trainer.callback_metrics


class _Encoder(torch.nn.Module):
    def __init__(self, width: int = 4, act: str = "relu") -> None:
        super().__init__()
        self.width, self.act = width, act


class _WideEncoder(_Encoder):
    def __init__(self, width: int = 8, act: str = "tanh", depth: int = 2) -> None:
        super().__init__(width, act)
        self.depth = depth


@pytest.mark.parametrize(
    "config",
    [{"width": 6}, {}, {"_class_path": f"{__name__}._WideEncoder", "depth": 3, "act": "gelu"}],
)
def test_instantiate_module_builds_what_lightning_s_builds(config) -> None:
    from lightning.pytorch.cli import instantiate_module as lightning_instantiate

    from trainmesh.cli import instantiate_module

    ours, theirs = instantiate_module(_Encoder, dict(config)), lightning_instantiate(_Encoder, dict(config))
    assert type(ours) is type(theirs) and vars(ours)["width"] == vars(theirs)["width"]
    assert (ours.act, getattr(ours, "depth", None)) == (theirs.act, getattr(theirs, "depth", None))


def test_the_saved_config_is_written_from_a_parser_unpickled_in_a_new_process(tmp_path, monkeypatch):
    """Under ``ddp_spawn`` the workers get the CLI's SaveConfigCallback (its parser and config)
    pickled; rank 0 writes config.yaml there. A new interpreter has none of jsonargparse's loader
    modes registered in the launching process: our parser's save raised
    ``KeyError: 'trainmesh_lightning_yaml'`` (Lightning 2.6.6 wrote the file: a published
    autoencoder program, ``LightningCLI`` with ``--trainer.strategy=ddp_spawn --trainer.devices=2``)."""
    import pickle

    from jsonargparse import _loaders_dumpers

    from trainmesh.cli.lightning_paths import LOADER_MODE

    with pytest.warns(UserWarning, match="seed"):
        cli = LightningCLI(Net, Data, run=False, args=["--trainer.default_root_dir", str(tmp_path)])
    (saver,) = [c for c in cli.trainer.callbacks if isinstance(c, SaveConfigCallback)]
    payload = pickle.dumps(saver)
    # what a spawned interpreter starts with: only jsonargparse's own modes
    monkeypatch.delitem(_loaders_dumpers.loaders, LOADER_MODE)
    monkeypatch.delitem(_loaders_dumpers.loader_exceptions, LOADER_MODE, raising=False)
    worker_saver = pickle.loads(payload)
    written = tmp_path / "config.yaml"
    worker_saver.parser.save(worker_saver.config, str(written), skip_unset=False, overwrite=True)
    assert yaml.safe_load(written.read_text())["model"] == {"hidden": 32, "lr": 0.1}
