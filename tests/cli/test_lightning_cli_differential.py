"""``LightningCLI``, trainmesh's against Lightning 2.6's, on the same program and command lines.

Each case builds both CLIs (``run=False`` where it can, so nothing trains), and compares what each
parsed (the config, class paths reduced to class names), built (the classes and arguments of the
callbacks, loggers, strategy, profiler the options ask for) or wrote (``config.yaml``,
``hparams.yaml``). Lightning is the owner's run here: the tests are skipped without it.
"""

from __future__ import annotations

import inspect
import json
import sys
import typing
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("lightning")

import lightning.pytorch as L  # noqa: E402
import lightning.pytorch.cli as lcli  # noqa: E402

import trainmesh as tm  # noqa: E402
import trainmesh.cli as tcli  # noqa: E402
from helpers import lightning_cli_programs  # noqa: E402
from helpers.lightning_cli_programs import (  # noqa: E402
    CLASSES,
    LightningCallables,
    TrainmeshCallables,
    built,
    normal,
    without_own,
)

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


CLI_CLASS = {"lightning": lcli.LightningCLI, "trainmesh": tcli.LightningCLI}


@pytest.fixture(autouse=True)
def _no_command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["main.py"])  # both CLIs warn when given args and a command line


def build(framework: str, args, cli_class=None, **kwargs):
    model_class, data_class = CLASSES[framework]
    kwargs.setdefault("run", False)
    return (cli_class or CLI_CLASS[framework])(model_class, data_class, args=args, **kwargs)


def parsed(cli, *, own: bool = False) -> dict:
    """The parsed config as data; without trainmesh's own Trainer arguments unless ``own``."""
    config = yaml.safe_load(cli.parser.dump(cli.config, skip_none=False, skip_check=True))
    return without_own(normal(config[cli.subcommand] if cli.subcommand else config), own)


# Constructors that differ (docs/notes/f-cli.md): the strategies' are each library's own (Lightning's
# DDPStrategy takes accelerator, parallel_devices, ...): the arguments given are compared.
def _known_differences_out(trainer: dict) -> dict:
    trainer = dict(trainer)
    if isinstance(trainer["strategy"], dict):
        given = trainer["strategy"]["init_args"]["find_unused_parameters"]
        trainer["strategy"] = {"class_path": trainer["strategy"]["class_path"], "find_unused_parameters": given}
    return trainer


# ---- 1. every Trainer argument Lightning's CLI parses, parsed and built the same ---------------------------
TRAINER_CASES = {
    "callbacks_append": ["--trainer.callbacks+=LearningRateMonitor", "--trainer.callbacks.logging_interval=epoch"],
    "callbacks_two_with_arguments": [
        "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.monitor=val_loss",
        "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val_loss", "--trainer.callbacks.patience=2",
    ],
    "callbacks_json": ['--trainer.callbacks=[{"class_path": "EarlyStopping", "init_args": {"monitor": "x"}}]'],
    "logger_append": ["--trainer.logger+=CSVLogger", "--trainer.logger.save_dir={root}",
                      "--trainer.logger+=TensorBoardLogger", "--trainer.logger.save_dir={root}"],
    "logger_class": ["--trainer.logger=CSVLogger", "--trainer.logger.save_dir={root}", "--trainer.logger.name=x"],
    "logger_false": ["--trainer.logger=false"],
    "logger_writer_arguments": ["--trainer.logger=TensorBoardLogger", "--trainer.logger.save_dir={root}",
                                "--trainer.logger.flush_secs=5"],
    "strategy_class": ["--trainer.strategy=DDPStrategy", "--trainer.strategy.find_unused_parameters=true"],
    "strategy_name": ["--trainer.strategy=ddp", "--trainer.accelerator=cpu", "--trainer.devices=1"],
    "profiler_name": ["--trainer.profiler=simple"],
    "profiler_class": ["--trainer.profiler=SimpleProfiler", "--trainer.profiler.filename=perf"],
    "precision": ["--trainer.precision=32"],
    "precision_string": ["--trainer.precision=bf16-mixed"],
    "precision_16_mixed_on_cpu": ["--trainer.precision=16-mixed", "--trainer.accelerator=cpu"],
    "max_time_string": ["--trainer.max_time=00:00:05:00"],
    "max_time_dict": ['--trainer.max_time={"minutes": 5}'],
    "val_check_interval": ["--trainer.val_check_interval=0.5", "--trainer.check_val_every_n_epoch=2"],
    "val_check_interval_time_string": ["--trainer.val_check_interval", "00:00:00:01"],
    "val_check_interval_time_dict": ['--trainer.val_check_interval={"seconds": 90}'],
    "accelerator": ["--trainer.accelerator=cpu", "--trainer.devices=1"],
    "opt_out_defaults": ["--trainer.log_every_n_steps=3", "--trainer.num_sanity_val_steps=0",
                         "--trainer.enable_checkpointing=false"],
    "limits": ["--trainer.limit_train_batches=0.5", "--trainer.limit_val_batches=2", "--trainer.max_steps=7"],
    "default_root_dir": ["--trainer.default_root_dir={root}"],
}  # fmt: skip


def _validation_interval(trainer) -> tuple:
    """A time-based interval: no ``trainer.val_check_interval`` in Lightning 2.6 (its seconds apart)."""
    interval = trainer.val_check_interval if hasattr(trainer, "val_check_interval") else "absent"
    return interval, type(interval).__name__, trainer._val_check_time_interval


WATCHED = {
    "LearningRateMonitor": ["logging_interval"],
    "ModelCheckpoint": ["monitor"],
    "EarlyStopping": ["monitor", "patience"],
    "CSVLogger": ["save_dir", "name"],
    "TensorBoardLogger": ["save_dir"],
    "SimpleProfiler": ["filename"],
}


@pytest.mark.parametrize("case", list(TRAINER_CASES))
def test_trainer_options_parse_and_build_as_lightning_s(case, tmp_path):
    args = [a.replace("{root}", str(tmp_path)) for a in TRAINER_CASES[case]]
    if not any("default_root_dir" in a for a in args):
        args.append(f"--trainer.default_root_dir={tmp_path}")
    ours, theirs = build("trainmesh", [*QUIET, *args]), build("lightning", [*QUIET, *args])
    assert _known_differences_out(parsed(ours)["trainer"]) == _known_differences_out(parsed(theirs)["trainer"])
    for attribute in ("callbacks", "loggers"):
        assert built(getattr(ours.trainer, attribute), WATCHED) == built(getattr(theirs.trainer, attribute), WATCHED)
    assert built([ours.trainer.profiler], WATCHED) == built([theirs.trainer.profiler], WATCHED)
    assert type(ours.trainer.strategy).__name__ == type(theirs.trainer.strategy).__name__
    # "16-mixed" on the CPU: "bf16-mixed" in both (before: trainmesh's stayed "16-mixed", fp16 with a scaler)
    assert ours.trainer.precision == theirs.trainer.precision
    assert _validation_interval(ours.trainer) == _validation_interval(theirs.trainer)
    if case == "strategy_class":
        given = theirs.trainer.strategy._ddp_kwargs["find_unused_parameters"]
        assert ours.trainer.strategy.ddp_options["find_unused_parameters"] is given is True
    if case == "opt_out_defaults":
        for name in ("log_every_n_steps", "num_sanity_val_steps", "checkpoint_callback"):
            assert getattr(ours.trainer, name) == getattr(theirs.trainer, name)


def test_a_config_file_s_callbacks_and_logger_are_built_as_lightning_s(tmp_path):
    config = {
        "trainer": {
            "default_root_dir": str(tmp_path),
            "callbacks": [
                {"class_path": "ModelCheckpoint", "init_args": {"monitor": "val_loss"}},
                {"class_path": "lightning.pytorch.callbacks.LearningRateMonitor"},  # as Lightning writes it
            ],
            "logger": {
                "class_path": "lightning.pytorch.loggers.csv_logs.CSVLogger",
                "init_args": {"save_dir": str(tmp_path), "name": "csv"},
            },
        }
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    ours, theirs = (build(f, ["-c", str(tmp_path / "config.yaml")]) for f in ("trainmesh", "lightning"))
    assert parsed(ours)["trainer"] == parsed(theirs)["trainer"]
    assert built(ours.trainer.callbacks, WATCHED) == built(theirs.trainer.callbacks, WATCHED)
    assert built(ours.trainer.loggers, WATCHED) == built(theirs.trainer.loggers, WATCHED)


def test_the_trainer_section_lists_lightning_s_arguments_in_its_order():
    from trainmesh.cli.trainer_arguments import LIGHTNING_ORDER, TRAINMESH_OWN

    lightning_names = [n for n in inspect.signature(L.Trainer).parameters]
    assert list(LIGHTNING_ORDER) == lightning_names
    ours, theirs = parsed(build("trainmesh", []), own=True), parsed(build("lightning", []))
    assert list(ours["trainer"]) == [*lightning_names, *TRAINMESH_OWN]
    assert {k: ours["trainer"][k] for k in lightning_names} == theirs["trainer"]
    assert ours == {**theirs, "trainer": ours["trainer"]}  # seed_everything, model, data, optimizer, lr_scheduler


# ---- 2. what the run writes: config.yaml, hparams.yaml, the checkpoint's hyper_parameters ------------------
def _fit(framework: str, root: Path, *args: str, **kwargs):
    fit_args = ["fit", *QUIET, f"--trainer.default_root_dir={root}", "--trainer.max_epochs=1", *args]
    fit_args += ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--trainer.logger+=CSVLogger"]
    fit_args += [f"--trainer.logger.save_dir={root}", "--trainer.num_sanity_val_steps=0"]
    return build(framework, fit_args, run=True, **kwargs)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One fit under each framework, with an optimizer, a scheduler, a seed and a callback given."""
    args = ["--seed_everything=7", "--model.hidden=5", "--model.milestones=[3, 4]", "--optimizer=Adam"]
    args += ["--optimizer.lr=0.01", "--lr_scheduler=StepLR", "--lr_scheduler.step_size=2"]
    args += ["--trainer.callbacks+=LearningRateMonitor"]
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["main.py"])
        for framework in ("lightning", "trainmesh"):
            root = tmp_path_factory.mktemp(framework)
            runs[framework] = (_fit(framework, root, *args), root)
    return runs


def _written(root: Path, name: str) -> dict:
    [path] = root.rglob(name)
    return normal(yaml.unsafe_load(path.read_text()))


def test_config_yaml_is_lightning_s_section_by_section(fitted):
    ours, theirs = (without_own(_written(fitted[f][1], "config.yaml")) for f in ("trainmesh", "lightning"))
    root = {f: str(fitted[f][1]) for f in fitted}
    theirs = json.loads(json.dumps(theirs).replace(root["lightning"], root["trainmesh"]))
    assert ours["trainer"] == theirs["trainer"]
    for section in ("seed_everything", "model", "data", "optimizer", "lr_scheduler", "ckpt_path"):
        assert ours[section] == theirs[section], section
    assert list(ours) == list(theirs)


def test_the_run_logs_and_trains_as_lightning_s(fitted):
    """--optimizer Adam, --lr_scheduler StepLR, --trainer.callbacks+=LearningRateMonitor, a CSVLogger: the
    same metrics.csv (lr-Adam, val_loss) and weights."""
    rows = {f: next(fitted[f][1].rglob("metrics.csv")).read_text() for f in fitted}
    assert rows["trainmesh"] == rows["lightning"] and "lr-Adam" in rows["lightning"]
    weights = {f: [p.detach() for p in fitted[f][0].model.parameters()] for f in fitted}
    assert all(torch.equal(a, b) for a, b in zip(weights["trainmesh"], weights["lightning"], strict=True))


def test_hyperparameters_are_the_config_s_with_lightning_s_instantiator(fitted):
    ours, theirs = (fitted[f][0].model.hparams for f in ("trainmesh", "lightning"))
    assert dict(ours) == dict(theirs)  # milestones a list, as parsed; _instantiator: Lightning's path
    hparams = {f: _written(fitted[f][1], "hparams.yaml") for f in fitted}
    assert hparams["trainmesh"] == hparams["lightning"]
    checkpoints = {f: torch.load(next(fitted[f][1].rglob("*.ckpt")), weights_only=False) for f in fitted}
    assert dict(checkpoints["trainmesh"]["hyper_parameters"]) == dict(checkpoints["lightning"]["hyper_parameters"])
    model_class = CLASSES["trainmesh"][0]
    loaded = model_class.load_from_checkpoint(next(fitted["trainmesh"][1].rglob("*.ckpt")))
    assert loaded.hparams.milestones == [3, 4] and loaded.net.out_features == 5


# ---- 4. the constructor's arguments and the parser's features ----------------------------------------------
def _both(args, **kwargs):
    return parsed(build("trainmesh", args, **kwargs)), parsed(build("lightning", args, **kwargs))


def test_subclass_mode_keeps_the_class_path_in_the_hyperparameters_as_lightning(tmp_path):
    found = {}
    for framework in ("trainmesh", "lightning"):
        path = f"{lightning_cli_programs.__name__}.{framework.title()}Net"
        args = [f"--trainer.default_root_dir={tmp_path}", f"--model={path}", "--model.init_args.hidden=3"]
        cli = build(framework, args, subclass_mode_model=True)
        hparams = dict(cli.model.hparams)
        found[framework] = {**hparams, "_class_path": hparams["_class_path"].replace(path, "Net")}
        found[framework]["config"] = parsed(cli)["model"]["init_args"]
    assert found["trainmesh"] == found["lightning"]


def test_args_as_a_list_a_dict_and_a_namespace(tmp_path):
    root = f"--trainer.default_root_dir={tmp_path}"
    as_dict = {"trainer": {"max_epochs": 3, "default_root_dir": str(tmp_path)}, "model": {"hidden": 3}}
    for args in ([root, "--trainer.max_epochs=3", "--model.hidden=3"], as_dict):
        ours, theirs = _both(args)
        assert ours["trainer"]["max_epochs"] == theirs["trainer"]["max_epochs"] == 3
        assert ours["model"] == theirs["model"]
    from jsonargparse import Namespace

    ours, theirs = _both(Namespace(trainer=Namespace(max_steps=4, default_root_dir=str(tmp_path))))
    assert ours["trainer"]["max_steps"] == theirs["trainer"]["max_steps"] == 4


def test_several_config_files_and_the_environment(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"trainer": {"max_epochs": 2}, "model": {"hidden": 3}}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"model": {"lr": 0.5}}))
    args = ["--config", str(tmp_path / "a.yaml"), "-c", str(tmp_path / "b.yaml"), "--model.hidden=4"]
    args.append(f"--trainer.default_root_dir={tmp_path}")
    ours, theirs = _both(args)
    assert ours["model"] == theirs["model"] and ours["trainer"]["max_epochs"] == theirs["trainer"]["max_epochs"]
    monkeypatch.setenv("PL_TRAINER__MAX_EPOCHS", "6")
    monkeypatch.setenv("PL_MODEL__HIDDEN", "9")
    ours, theirs = _both([f"--trainer.default_root_dir={tmp_path}"], parser_kwargs={"default_env": True})
    assert (ours["trainer"]["max_epochs"], ours["model"]) == (theirs["trainer"]["max_epochs"], theirs["model"])


def test_defaults_seed_and_trainer_defaults(tmp_path):
    kwargs = {"trainer_defaults": {"max_epochs": 4, "log_every_n_steps": 2}, "seed_everything_default": 5}
    ours, theirs = _both([f"--trainer.default_root_dir={tmp_path}"], **kwargs)
    assert ours["trainer"] == theirs["trainer"]
    assert ours["seed_everything"] == theirs["seed_everything"] == 5


def test_print_config_prints_lightning_s_config_and_reads_lightning_s(tmp_path, capsys):
    printed = {}
    for framework in ("trainmesh", "lightning"):
        with pytest.raises(SystemExit):
            args = ["fit", "--print_config", "--model.hidden=2", "--trainer.callbacks+=LearningRateMonitor"]
            build(framework, args, run=True)
        printed[framework] = capsys.readouterr().out
    ours, theirs = (without_own(normal(yaml.safe_load(printed[f]))) for f in ("trainmesh", "lightning"))
    assert ours == theirs
    # Lightning's printed config (lightning.pytorch.callbacks.LearningRateMonitor) read by trainmesh's CLI
    (tmp_path / "lightning.yaml").write_text(printed["lightning"])
    with pytest.raises(SystemExit):
        build("trainmesh", ["fit", "-c", str(tmp_path / "lightning.yaml"), "--print_config"], run=True)
    assert without_own(normal(yaml.safe_load(capsys.readouterr().out))) == theirs


def test_hooks_links_and_added_arguments_run_in_lightning_s_order(tmp_path):
    calls = {}

    def cli_class(framework):
        base = CLI_CLASS[framework]
        callbacks = tm.callbacks if framework == "trainmesh" else L.callbacks
        seen = calls.setdefault(framework, [])

        class MyCLI(base):
            def add_arguments_to_parser(self, parser):
                parser.add_lightning_class_args(callbacks.EarlyStopping, "early_stopping")
                parser.set_defaults({"early_stopping.monitor": "val_loss"})
                parser.link_arguments("data.batch_size", "model.hidden")
                seen.append("add_arguments_to_parser")

            def before_instantiate_classes(self):
                seen.append("before_instantiate_classes")

            def after_instantiate_classes(self):
                seen.append("after_instantiate_classes")

            def before_validate(self):
                seen.append("before_validate")

            def after_validate(self):
                seen.append("after_validate")

        return MyCLI

    args = ["validate", *QUIET, "--data.batch_size=6", "--trainer.limit_val_batches=1", "--trainer.logger=false"]
    clis = {
        f: build(f, [*args, f"--trainer.default_root_dir={tmp_path / f}"], cli_class=cli_class(f), run=True)
        for f in ("trainmesh", "lightning")
    }
    # once per subcommand's parser: trainmesh's has 1.9's fifth subcommand besides Lightning 2.6's four
    assert (
        calls["trainmesh"].count("add_arguments_to_parser") == calls["lightning"].count("add_arguments_to_parser") + 1
    )
    ours, theirs = ([c for c in calls[f] if c != "add_arguments_to_parser"] for f in ("trainmesh", "lightning"))
    assert (
        ours
        == theirs
        == ["before_instantiate_classes", "after_instantiate_classes", "before_validate", "after_validate"]
    )
    assert parsed(clis["trainmesh"])["early_stopping"] == parsed(clis["lightning"])["early_stopping"]
    assert clis["trainmesh"].model.hparams.hidden == clis["lightning"].model.hparams.hidden == 6


def test_save_config_multifile_writes_lightning_s_files(tmp_path):
    written = {}
    for framework in ("trainmesh", "lightning"):
        root = tmp_path / framework
        args = ["fit", *QUIET, f"--trainer.default_root_dir={root}", "--trainer.max_steps=1"]
        args += ["--trainer.logger=false", "--trainer.enable_checkpointing=false", "--trainer.num_sanity_val_steps=0"]
        build(framework, args, run=True, save_config_kwargs={"multifile": True, "config_filename": "c.yaml"})
        written[framework] = sorted(p.name for p in root.iterdir())
    assert written["trainmesh"] == written["lightning"]


def test_the_module_s_names_are_lightning_s():
    own = [
        n for n in dir(lcli) if not n.startswith("_") and getattr(getattr(lcli, n), "__module__", "") == lcli.__name__
    ]
    assert set(own) - {"ModuleType"} <= set(tcli.__all__)  # ModuleType: a TypeVar of Lightning's annotations
    assert typing.get_args(tcli.ArgsType) == typing.get_args(lcli.ArgsType)
    init = {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.5}}
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert repr(tcli.instantiate_class(params, init)) == repr(lcli.instantiate_class(params, init))


def test_none_means_lightning_s_default_for_the_opt_out_arguments(tmp_path):
    """What a config's ``null`` passes: ``Trainer(logger=None, ...)`` builds Lightning 2.6's defaults."""
    names = ("logger", "enable_checkpointing", "enable_progress_bar", "enable_model_summary")
    nones = dict.fromkeys((*names, "log_every_n_steps", "num_sanity_val_steps", "precision"))
    ours = tm.Trainer(default_root_dir=str(tmp_path), **nones)
    theirs = L.Trainer(default_root_dir=str(tmp_path), **nones)
    assert ours.log_every_n_steps == theirs.log_every_n_steps == 50
    assert ours.num_sanity_val_steps == theirs.num_sanity_val_steps == 2
    assert ours.precision == theirs.precision == "32-true"
    assert (
        (ours.logger is None, ours.checkpoint_callback is None)
        == (False, False)
        == (
            theirs.logger is None,
            theirs.checkpoint_callback is None,
        )
    )
    assert ours.progress_bar_callback is not None and theirs.progress_bar_callback is not None


def test_optimizer_and_scheduler_callables_in_the_model_s_arguments(tmp_path):
    """Lightning's documented pattern: ``optimizer: OptimizerCallable`` in ``__init__``, chosen with
    ``--model.optimizer=SGD --model.optimizer.lr=0.3``."""
    args = [f"--trainer.default_root_dir={tmp_path}", "--model.optimizer=SGD", "--model.optimizer.lr=0.3"]
    args += ["--model.scheduler=StepLR", "--model.scheduler.step_size=4"]
    found = {}
    for framework in ("trainmesh", "lightning"):
        model_class = {"trainmesh": TrainmeshCallables, "lightning": LightningCallables}[framework]
        cli = CLI_CLASS[framework](model_class, CLASSES[framework][1], args=args, run=False)
        [optimizer], [scheduler] = cli.model.configure_optimizers()
        found[framework] = (
            parsed(cli)["model"],
            type(optimizer).__name__,
            optimizer.defaults["lr"],
            type(scheduler).__name__,
            scheduler.step_size,
        )
    assert found["trainmesh"] == found["lightning"]
    assert found["trainmesh"][1:] == ("SGD", 0.3, "StepLR", 4)
