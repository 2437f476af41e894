"""Lightning 1.x's ``Trainer.add_argparse_args`` / ``parse_argparser`` / ``from_argparse_args``
(trainer/lightning1/argparse_arguments.py) against pytorch-lightning 1.9.5's, recorded as data by
``tests/helpers/record_lightning_1_9_argparse.py`` in 1.9.5's own venv: each argument both have is
parsed the same way, the recorded command lines give the same values, and the arguments and defaults
that differ are the listed ones."""

import argparse
import json
from pathlib import Path

import pytest

from trainmesh import Trainer

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_argparse.json").read_text())

# 1.9.5's arguments trainmesh's Trainer does not take: none (min_steps, benchmark,
# reload_dataloaders_every_n_epochs and detect_anomaly were left out once; a 1.x command line
# giving them stopped with "unrecognized arguments", and a program saving vars(args) as its
# hyperparameters saved fewer than under 1.9.5).
NOT_TAKEN: set[str] = set()


def trainmesh_parser():
    return Trainer.add_argparse_args(argparse.ArgumentParser())


def test_arguments_are_parsed_as_lightning_1_9_parses_them():
    """Each argument's name (in 1.9.5's order), parser, default and help line as 1.9.5's. Before: trainmesh's
    order, no help, and trainmesh's defaults for six (``args.precision`` '32-true' where 1.9.5's is 32,
    ``args.devices`` / ``accelerator`` / ``strategy`` 'auto' for None, ``accumulate_grad_batches`` 1 for
    None, ``auto_select_gpus`` False for None)."""
    actions = {a.dest: a for a in trainmesh_parser()._actions if a.dest != "help"}
    recorded = RECORDED["arguments"]
    assert set(recorded) - set(actions) == NOT_TAKEN
    assert list(actions) == [name for name in recorded if name not in NOT_TAKEN]
    for name, action in actions.items():
        kind = getattr(action.type, "__name__", "") + ("?" if action.nargs == "?" else "")
        parsed = {"default": repr(action.default), "kind": kind, "help": bool(action.help)}
        assert parsed == recorded[name], name


@pytest.mark.parametrize("parse", RECORDED["parses"], ids=lambda p: " ".join(p["argv"]) or "none")
def test_command_lines_give_lightning_1_9s_values(parse):
    namespace = Trainer.parse_argparser(trainmesh_parser().parse_args(parse["argv"]))
    given = {k: repr(v) for k, v in vars(namespace).items() if f"--{k}" in parse["argv"]}
    assert given == parse["given"]


def test_from_argparse_args_builds_the_trainer():
    parser = trainmesh_parser()
    parser.add_argument("--my_custom_arg", default="something")
    argv = ["--max_epochs", "3", "--limit_train_batches", "0.5", "--logger", "false", "--my_custom_arg", "x"]
    args = Trainer.parse_argparser(parser.parse_args(argv))
    trainer = Trainer.from_argparse_args(args, enable_progress_bar=False, enable_checkpointing=False)
    assert (trainer.max_epochs, trainer.limit_train_batches, trainer.loggers) == (3, 0.5, [])
    grouped = Trainer.add_argparse_args(argparse.ArgumentParser(), use_argument_group=False)
    assert grouped.parse_args(["--fast_dev_run", "2"]).fast_dev_run == 2


def test_lightning_1_9s_defaults_build_the_default_trainer():
    """An empty command line (1.9.5's defaults: accelerator, devices, strategy, accumulate_grad_batches None,
    precision 32) builds the Trainer ``Trainer()`` builds, as 1.9.5's from_argparse_args builds its default one;
    a value given on the command line still reaches it."""
    quiet = {"enable_progress_bar": False, "enable_checkpointing": False, "logger": False}

    def built(argv):
        trainer = Trainer.from_argparse_args(Trainer.parse_argparser(trainmesh_parser().parse_args(argv)), **quiet)
        return (
            trainer.precision,
            trainer.num_devices,
            type(trainer.accelerator).__name__,
            type(trainer.strategy).__name__,
            trainer.accumulate_grad_batches,
        )

    default = Trainer(**quiet)
    # from_argparse_args is a 1.x spelling: the run is 1.x's, so its precision answers as 1.9.5's ("32", not "32-true")
    assert built([]) == ("32", 1, "CPUAccelerator", type(default.strategy).__name__, 1)
    assert default.precision == "32-true"
    assert built(["--accumulate_grad_batches", "2", "--precision", "64"])[::4] == ("64", 2)
