"""The ``trainmesh`` command line: class selection, help, configs, errors and one real run."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

import trainmesh
from trainmesh.cli.main import CLIError, collate_predictions, find_class_paths, main
from trainmesh.trainer.lightning1.legacy_arguments import LegacyArgumentNotice

_HELPER_MODULE = "tests_helpers_module"
_HELPER_SOURCE = textwrap.dedent(
    """
    import torch
    import trainmesh


    class Net(trainmesh.Module):
        def __init__(self, width: int = 7, activation: str = "relu"):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(64, width)
    """
)


@pytest.fixture
def helper_module(tmp_path, monkeypatch):
    """A user's model file on sys.path, as `--model tests_helpers_module:Net` finds it."""
    (tmp_path / f"{_HELPER_MODULE}.py").write_text(_HELPER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield _HELPER_MODULE
    sys.modules.pop(_HELPER_MODULE, None)


_ONE_STEP = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "1",
    "--trainer.limit_val_batches",
    "1",
    "--trainer.num_sanity_val_steps",
    "0",
    "--no_test",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def _printed(out: str, label: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(f"{label}: "))


def _print_config(capsys, *args: str) -> dict:
    assert main(["fit", *args, "--print_config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_fit_help_lists_trainer_model_data_and_config_options(capsys):
    assert main(["fit", "--help"]) == 0
    out = capsys.readouterr().out
    for option in (
        "--trainer.max_epochs",
        "--trainer.devices",
        "--model.hidden_dim",
        "--data.batch_size",
        "--config",
        "--print_config",
        "--ckpt_path",
        "--seed",
        "--no_test",
    ):
        assert option in out, option
    assert "class_path:" in out  # the epilog documents the config layout


def test_help_lists_the_arguments_of_the_chosen_model(helper_module, capsys):
    for spelling in (f"{helper_module}:Net", f"{helper_module}.Net"):
        assert main(["fit", "--model", spelling, "--help"]) == 0
        out = capsys.readouterr().out
        assert "--model.width" in out and "--model.activation" in out
        assert f"Model: {spelling}" in out
        assert "--model.hidden_dim HIDDEN_DIM" not in out  # the default model's options are gone


def test_top_level_help_lists_the_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("fit", "validate", "test", "predict"):
        assert command in out
    # The README's `trainmesh checkpoint consolidate|inspect` is listed with what it does.
    assert re.search(r"^ +checkpoint +Consolidate, inspect or verify a saved checkpoint\.$", out, re.MULTILINE), out
    assert "{fit,validate,test,predict,checkpoint,estimate,scale,project}" in out
    assert re.search(r"^ +estimate +Estimate per-rank memory", out, re.MULTILINE), out
    assert re.search(r"^ +scale +Measure throughput, speedup and efficiency", out, re.MULTILINE), out
    assert re.search(r"^ +project +Project step time, efficiency", out, re.MULTILINE), out


def test_the_checkpoint_command_keeps_its_own_help(capsys):
    assert main(["checkpoint", "--help"]) == 0
    out = capsys.readouterr().out
    assert "consolidate" in out and "inspect" in out


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "--trainer.max_epoch", "2"],
        ["fit", "--trainer.max_epoch=2"],
        ["fit", "--model.hidden_di", "8"],
        ["fit", "--no_tes"],
    ],
)
def test_abbreviated_options_are_refused(capsys, args):
    # argparse would take --trainer.max_epoch for --trainer.max_epochs without a word.
    assert main([*args, "--print_config"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: " + args[1].split("=")[0] in err, err


def test_abbreviated_options_are_refused_by_the_checkpoint_command(tmp_path, capsys):
    assert main(["checkpoint", "inspect", str(tmp_path / "x.ckpt"), "--hel"]) == 2
    assert "unrecognized arguments: --hel" in capsys.readouterr().err


_SEED_SPELLINGS = ("gpus", "distributed_backend", "weights_summary", "num_tpu_cores")


def test_print_config_and_help_leave_out_the_seed_spellings(capsys):
    assert not set(_SEED_SPELLINGS) & set(_print_config(capsys)["trainer"])
    assert main(["fit", "--help"]) == 0
    out = capsys.readouterr().out
    assert not [name for name in _SEED_SPELLINGS if f"--trainer.{name}" in out]


def test_seed_spellings_are_accepted_and_printed_in_todays_spelling(tmp_path, capsys):
    with pytest.warns(LegacyArgumentNotice) as notices:
        config = _print_config(
            capsys,
            "--trainer.gpus",
            "0",
            "--trainer.distributed_backend",
            "ddp_spawn",
            "--trainer.weights_summary",
            "null",
        )
    assert len(notices) == 3
    trainer = config["trainer"]
    assert (trainer["accelerator"], trainer["devices"], trainer["strategy"]) == ("cpu", 1, "ddp_spawn")
    assert trainer["enable_model_summary"] is False
    assert not set(_SEED_SPELLINGS) & set(trainer)
    # An old config file too; the printed config then means the same run in today's spelling.
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"accelerator": "ddp", "gpus": 0}}))
    with pytest.warns(LegacyArgumentNotice):
        trainer = _print_config(capsys, "--config", str(path))["trainer"]
    assert (trainer["accelerator"], trainer["devices"], trainer["strategy"]) == ("cpu", 1, "ddp")


def test_seed_spellings_still_run_as_translated(tmp_path, capsys):
    with pytest.warns(LegacyArgumentNotice, match="today: accelerator='cpu', devices=1"):
        assert main(["fit", "--trainer.gpus", "0", *_ONE_STEP, "--trainer.default_root_dir", str(tmp_path)]) == 0
    assert "val_loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("nope.mod:X", "cannot import module 'nope.mod' (no module named 'nope')"),
        ("trainmesh.demo:Nope", "module 'trainmesh.demo' has no attribute 'Nope'"),
        ("Net", "is not an import path"),
    ],
)
def test_bad_model_path_exits_2_with_a_message(capsys, path, expected):
    assert main(["fit", "--model", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert expected in err
    assert "package.module:ClassName" in err
    assert "Traceback" not in err


def test_a_class_that_is_not_a_module_is_refused(capsys):
    assert main(["fit", "--model", "trainmesh.data.digits:DigitsDataModule"]) == 2
    assert "is not a trainmesh.Module" in capsys.readouterr().err


def test_traceback_flag_and_env_let_the_error_through(monkeypatch):
    with pytest.raises(CLIError, match="nope"):
        main(["fit", "--model", "nope.mod:X", "--traceback"])
    monkeypatch.setenv("TRAINMESH_TRACEBACK", "1")
    with pytest.raises(CLIError, match="nope"):
        main(["fit", "--model", "nope.mod:X"])


def test_an_invalid_trainer_setting_exits_2(capsys):
    assert main(["fit", "--trainer.max_epochs", "-5", "--trainer.logger", "false"]) == 2
    assert "`max_epochs` must be a non-negative integer or -1. You passed in -5" in capsys.readouterr().err


def test_argument_type_errors_exit_2(capsys):
    assert main(["fit", "--model.hidden_dim", "wide"]) == 2
    assert "model.hidden_dim" in capsys.readouterr().err


def test_cli_defaults_and_flags_reach_the_config(capsys):
    config = _print_config(capsys, "--model.hidden_dim", "64", "--data.batch_size", "16", "--no_test")
    assert config["model"]["class_path"] == "trainmesh.demo:DigitsClassifier"
    assert config["model"]["hidden_dim"] == 64
    assert config["data"]["batch_size"] == 16
    assert config["trainer"]["max_epochs"] == 20
    assert config["trainer"]["default_root_dir"] is None  # the current directory, as in the Python API
    assert config["seed"] == 0 and config["test"] is False
    assert _print_config(capsys, "--test", "false")["test"] is False


def test_yaml_config_sets_trainer_model_and_data_arguments(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"hidden_dim": 48, "dropout": 0.0},
                "data": {"batch_size": 16},
                "trainer": {"max_epochs": 3, "logger": False},
                "seed": 7,
            }
        )
    )
    config = _print_config(capsys, "--config", str(path))
    assert config["model"]["hidden_dim"] == 48 and config["model"]["dropout"] == 0.0
    assert config["data"]["batch_size"] == 16
    assert config["trainer"]["max_epochs"] == 3 and config["trainer"]["logger"] is False
    assert config["seed"] == 7
    # Left to right: a flag after the config overrides it.
    assert _print_config(capsys, "--config", str(path), "--model.hidden_dim", "50")["model"]["hidden_dim"] == 50


def test_yaml_config_chooses_the_model_class(tmp_path, helper_module, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": {"class_path": f"{helper_module}:Net", "width": 3}}))
    config = _print_config(capsys, "--config", str(path))
    assert config["model"] == {"class_path": f"{helper_module}:Net", "width": 3, "activation": "relu"}


def test_printed_config_round_trips(tmp_path, capsys):
    first = _print_config(capsys, "--model.hidden_dim", "32", "--trainer.max_epochs", "4")
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(first))
    assert _print_config(capsys, "--config", str(path)) == first


def test_a_model_given_as_a_string_in_a_config_is_explained(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("model: trainmesh.demo:DigitsClassifier\n")
    assert main(["fit", "--config", str(path)]) == 2
    assert "must be a mapping" in capsys.readouterr().err


def test_missing_config_file_exits_2(tmp_path, capsys):
    assert main(["fit", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_find_class_paths_rewrites_the_short_flags():
    args, paths = find_class_paths(["--model=a.b:Net", "--data", "c.d:Data", "--model.width", "3"])
    assert args == ["--model.class_path", "a.b:Net", "--data.class_path", "c.d:Data", "--model.width", "3"]
    assert paths == {"model": "a.b:Net", "data": "c.d:Data"}


def test_collate_predictions_concatenates_batches():
    assert torch.equal(collate_predictions([torch.tensor([1, 2]), torch.tensor([3])]), torch.tensor([1, 2, 3]))
    two_loaders = collate_predictions([[torch.tensor([1])], [torch.tensor([2]), torch.tensor([3])]])
    assert [t.tolist() for t in two_loaders] == [[1], [2, 3]]
    assert collate_predictions([{"a": 1}]) == [{"a": 1}]


@pytest.mark.slow
def test_fit_then_predict_end_to_end(tmp_path, capsys):
    common = ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    assert main(["fit", "--trainer.max_epochs", "2", *common]) == 0
    out = capsys.readouterr().out
    assert "test_acc" in out and "test_loss" in out and "val_acc" in out
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in out.splitlines() if ": " in line}
    checkpoint = Path(lines["best checkpoint"])
    assert checkpoint.is_file()
    assert Path(lines["logs"]).is_dir()

    output = tmp_path / "preds.pt"
    assert main(["predict", "--ckpt_path", str(checkpoint), "--output", str(output), *common]) == 0
    predictions = torch.load(output)
    assert predictions.shape == (359,) and predictions.dtype == torch.int64


def test_cli_and_python_api_log_to_the_same_default_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", *_ONE_STEP]) == 0
    logs = Path(_printed(capsys.readouterr().out, "logs"))
    assert logs == tmp_path / "lightning_logs" / "version_0" and logs.is_dir()  # Lightning's default folder
    api = trainmesh.Trainer(accelerator="cpu", enable_progress_bar=False)
    assert Path(api.log_dir) == tmp_path / "lightning_logs" / "version_1"


def test_python_dash_m_trainmesh_help_exits_0():
    src = str(Path(trainmesh.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    # The timeout is only a hang guard: on a loaded 2-core machine this start-up took 24-68 s.
    result = subprocess.run(
        [sys.executable, "-m", "trainmesh", "--help"], capture_output=True, text=True, env=env, timeout=240
    )
    assert result.returncode == 0, result.stderr
    assert "fit" in result.stdout


@pytest.mark.parametrize(
    "command", ["fit", "validate", "test", "predict", "checkpoint", "estimate", "scale", "project"]
)
def test_every_command_s_help_has_one_style(command, capsys):
    """jsonargparse builds fit/validate/test/predict/checkpoint, argparse estimate/scale/project: the
    help reads alike (usage naming the command, its description, the same help line, no abbreviations)."""
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trainmesh {command} "), out[:200]
    assert re.search(r"^  -h, --help +Show this help message and exit\.$", out, re.MULTILINE), out[:2000]
