"""A config Lightning 2.6's ``LightningCLI`` printed (``--print_config``, the shape of its
``config.yaml``) that names Trainer arguments by ``class_path``, read by trainmesh's CLI.

Lightning writes every parameter of the class it names, its defaults included: a ``DDPStrategy``
comes with ``accelerator: null``, ``parallel_devices: null``, ``dim: 0``, ``init_sync: true``
and the rest of torch DDP's arguments; a ``SingleDeviceStrategy`` with ``device: cpu``; a plugin
under ``lightning.fabric.plugins``. trainmesh's CLI refused each of these before ("Option
'accelerator' is not accepted", "Option 'device' is not accepted", an unknown class path). Now
it builds the same classes from them, prints its own config in the same shape (``class_path`` +
``init_args``), and refuses a value it would otherwise drop.
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml

pytest.importorskip("lightning")

import lightning.pytorch.cli as lcli  # noqa: E402
from lightning.pytorch.callbacks import Callback as LightningCallback  # noqa: E402

import trainmesh.cli as tcli  # noqa: E402
from helpers.lightning_cli_programs import CLASSES, normal  # noqa: E402
from trainmesh.callbacks import Callback as TrainmeshCallback  # noqa: E402

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
CASES = {
    "ddp": ["--trainer.strategy=DDPStrategy", "--trainer.strategy.find_unused_parameters=true"],
    "single_device": ["--trainer.strategy=SingleDeviceStrategy", "--trainer.strategy.device=cpu"],
    "plugin": ["--trainer.plugins+=TorchCheckpointIO"],
    "profiler": ["--trainer.profiler=SimpleProfiler", "--trainer.profiler.filename=perf"],
}


@pytest.fixture(autouse=True)
def _no_command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["main.py"])


def printed(cli_class, classes, args, capsys) -> dict:
    with pytest.raises(SystemExit):
        cli_class(*classes, args=["fit", "--print_config", *args])
    return yaml.safe_load(capsys.readouterr().out)


def _shape(config: dict) -> dict:
    """The class-valued Trainer arguments: each class's name and, where given, its init_args' names
    (the constructors are each library's own: trainmesh's takes fewer)."""
    trainer = normal(config["trainer"])
    return {k: _names(trainer[k]) for k in ("strategy", "plugins", "profiler")}


def _names(value):
    if isinstance(value, list):
        return [_names(v) for v in value]
    if isinstance(value, dict):
        return {"class_path": value["class_path"], "init_args": sorted(value.get("init_args", {}))}
    return value


@pytest.mark.parametrize("case", list(CASES))
def test_lightning_s_printed_config_builds_the_same_classes_and_prints_in_its_shape(case, tmp_path, capsys):
    args = [*QUIET, f"--trainer.default_root_dir={tmp_path}", *CASES[case]]
    theirs = printed(lcli.LightningCLI, CLASSES["lightning"], args, capsys)
    (tmp_path / "lightning.yaml").write_text(yaml.safe_dump(theirs))
    from_theirs = ["-c", str(tmp_path / "lightning.yaml")]
    reread = printed(tcli.LightningCLI, CLASSES["trainmesh"], from_theirs, capsys)
    ours = printed(tcli.LightningCLI, CLASSES["trainmesh"], args, capsys)
    assert _shape(reread) == _shape(ours)  # what trainmesh writes, whether given Lightning's config or the options
    for key, value in _shape(theirs).items():  # and the same classes as Lightning's, by class_path
        mine = _shape(reread)[key]
        if isinstance(value, dict):
            assert mine["class_path"] == value["class_path"]
            assert set(mine["init_args"]) - {"placement"} <= set(value["init_args"])  # placement: the Trainer sets it
        elif isinstance(value, list):
            assert [m["class_path"] for m in mine] == [v["class_path"] for v in value]
        else:
            assert mine == value
    theirs_unrun = {k: v for k, v in theirs.items() if k in ("trainer", "model", "data", "seed_everything")}
    (tmp_path / "unrun.yaml").write_text(yaml.safe_dump(theirs_unrun))  # run=False: no subcommand's keys
    cli = tcli.LightningCLI(*CLASSES["trainmesh"], args=["-c", str(tmp_path / "unrun.yaml")], run=False)
    lightning_cli = lcli.LightningCLI(*CLASSES["lightning"], args=args, run=False)
    assert type(cli.trainer.strategy).__name__ == type(lightning_cli.trainer.strategy).__name__
    if case == "ddp":
        assert cli.trainer.strategy.ddp_options["find_unused_parameters"] is True


def test_a_lightning_argument_trainmesh_cannot_take_is_refused_not_dropped(tmp_path, capsys):
    theirs = printed(lcli.LightningCLI, CLASSES["lightning"], [*QUIET, *CASES["ddp"]], capsys)
    theirs["trainer"]["strategy"]["init_args"]["dim"] = 1  # not torch DDP's default: it would be lost
    (tmp_path / "lightning.yaml").write_text(yaml.safe_dump(theirs))
    with pytest.raises(ValueError, match="sets init_args.dim=1, which trainmesh's DDPStrategy does not take"):
        printed(tcli.LightningCLI, CLASSES["trainmesh"], ["-c", str(tmp_path / "lightning.yaml")], capsys)


class _Untyped:
    def __init__(self, output_dir, write_interval="batch"):  # no annotations, as users write them
        super().__init__()
        self.output_dir, self.write_interval = output_dir, write_interval


class LightningUntypedCallback(_Untyped, LightningCallback):
    pass


class TrainmeshUntypedCallback(_Untyped, TrainmeshCallback):
    pass


def test_a_callback_with_an_untyped_parameter_is_built_from_its_class_path_as_lightning_builds_it(tmp_path):
    # Academich/translation-transformer's config: `callbacks: - class_path: callbacks.PredictionWriter`
    # whose `__init__(self, output_dir, ...)` has no annotation. trainmesh refused it ("With
    # fail_untyped=True, all mandatory parameters must have a supported type"); Lightning builds it.
    built = []
    for framework, cli_class, callback in (
        ("lightning", lcli.LightningCLI, LightningUntypedCallback),
        ("trainmesh", tcli.LightningCLI, TrainmeshUntypedCallback),
    ):
        config = {"class_path": f"{__name__}.{callback.__name__}", "init_args": {"output_dir": "out/p.csv"}}
        args = [*QUIET, f"--trainer.default_root_dir={tmp_path}", f"--trainer.callbacks={json.dumps([config])}"]
        cli = cli_class(*CLASSES[framework], args=args, run=False)
        mine = [c for c in cli.trainer.callbacks if isinstance(c, callback)]
        built.append([(c.output_dir, c.write_interval) for c in mine])
    assert built[0] == built[1] == [("out/p.csv", "batch")]
