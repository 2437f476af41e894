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
# reload_dataloaders_every_n_epochs and detect_anomaly were missing from the parser until the Trainer took them).
NOT_TAKEN: set[str] = set()
# Defaults that are spelled differently with the same meaning (1.9's None: "choose for me";
# accumulate_grad_batches None: 1), and auto_select_gpus (1.9 typed it Optional[bool]).
OTHER_DEFAULTS = {
    "devices": ("None", "'auto'"),
    "accelerator": ("None", "'auto'"),
    "strategy": ("None", "'auto'"),
    "precision": ("32", "'32-true'"),
    "accumulate_grad_batches": ("None", "1"),
    "auto_select_gpus": ("None", "False"),
}


def trainmesh_parser():
    return Trainer.add_argparse_args(argparse.ArgumentParser())


def test_arguments_are_parsed_as_lightning_1_9_parses_them():
    actions = {a.dest: a for a in trainmesh_parser()._actions if a.dest != "help"}
    recorded = RECORDED["arguments"]
    assert set(recorded) - set(actions) == NOT_TAKEN
    for name, action in actions.items():
        kind = getattr(action.type, "__name__", "") + ("?" if action.nargs == "?" else "")
        assert kind == recorded[name]["kind"], name
    defaults = {n: (recorded[n]["default"], repr(actions[n].default)) for n in actions}
    assert {n: d for n, d in defaults.items() if d[0] != d[1]} == OTHER_DEFAULTS


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
