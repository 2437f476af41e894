"""Lightning 1.x's argparse face of the Trainer: ``Trainer.add_argparse_args(parser)``,
``Trainer.parse_argparser(parser)`` and ``Trainer.from_argparse_args(args, **overrides)``, which 2.0
removed (for ``LightningCLI``). Each argument is parsed as pytorch-lightning 1.9.5 parses it
(``tests/helpers/lightning_1_9_argparse.json`` records 1.9.5's, compared in
``tests/trainer/test_argparse_1x.py``), in 1.9.5's order, with 1.9.5's default and a help line.

>>> import argparse
>>> from trainmesh import Trainer
>>> parser = Trainer.add_argparse_args(argparse.ArgumentParser())
>>> args = Trainer.parse_argparser(parser.parse_args(["--max_epochs", "3", "--fast_dev_run"]))
>>> args.max_epochs, args.fast_dev_run, args.precision
(3, True, 32)
"""

from __future__ import annotations

import inspect
import re
from argparse import ArgumentParser, Namespace, _ArgumentGroup
from collections.abc import Callable
from typing import Any

from trainmesh.utilities.parsing import str_to_bool, str_to_bool_or_int, str_to_bool_or_str


def _int_or_float_type(value: str) -> int | float:
    return float(value) if "." in value else int(value)


def _gpus_allowed_type(value: str) -> int | str:
    return str(value) if "," in value else int(value)


def _precision_allowed_type(value: str) -> int | str:
    try:
        return int(value)
    except ValueError:
        return value


_FLAG = (str_to_bool, True)
_NUMBER = (_int_or_float_type, False)
_INT, _TEXT = (int, False), (str, False)
# 1.9.5's arguments of its Trainer, in its order, each with 1.9.5's parser ("?": the value may be left
# out, a flag meaning True)
_PARSERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "logger": _FLAG,
    "enable_checkpointing": _FLAG,
    "default_root_dir": _TEXT,
    "gradient_clip_val": _NUMBER,
    "gradient_clip_algorithm": _TEXT,
    "num_nodes": _INT,
    "num_processes": _INT,
    "devices": _TEXT,
    "gpus": (_gpus_allowed_type, False),
    "auto_select_gpus": _FLAG,
    "tpu_cores": (_gpus_allowed_type, False),
    "ipus": _INT,
    "enable_progress_bar": _FLAG,
    "overfit_batches": _NUMBER,
    "track_grad_norm": (float, False),
    "check_val_every_n_epoch": _INT,
    "fast_dev_run": (str_to_bool_or_int, True),
    "accumulate_grad_batches": _INT,
    "max_epochs": _INT,
    "min_epochs": _INT,
    "max_steps": _INT,
    "min_steps": _INT,
    "max_time": _TEXT,
    **dict.fromkeys(tuple(f"limit_{s}_batches" for s in ("train", "val", "test", "predict")), _NUMBER),
    "val_check_interval": _NUMBER,
    "log_every_n_steps": _INT,
    "accelerator": _TEXT,
    "strategy": _TEXT,
    "sync_batchnorm": _FLAG,
    "precision": (_precision_allowed_type, False),
    "enable_model_summary": _FLAG,
    "num_sanity_val_steps": _INT,
    "resume_from_checkpoint": _TEXT,
    "profiler": _TEXT,
    "benchmark": _FLAG,
    "reload_dataloaders_every_n_epochs": _INT,
    "auto_lr_find": (str_to_bool_or_str, True),
    "replace_sampler_ddp": _FLAG,
    "detect_anomaly": _FLAG,
    "auto_scale_batch_size": (str_to_bool_or_str, True),
    "plugins": _TEXT,
    "amp_backend": _TEXT,
    "amp_level": _TEXT,
    "move_metrics_to_cpu": _FLAG,
    "multiple_trainloader_mode": _TEXT,
    "inference_mode": _FLAG,
}
# 1.9.5's defaults where trainmesh's Trainer spells the same choice otherwise (None: "choose for me",
# accumulate_grad_batches None: 1, precision 32): a program reading args.<name> sees 1.9.5's value, and
# from_argparse_args leaves such a value out, so the Trainer takes its own default, the same choice
_LIGHTNING_1_9_DEFAULTS: dict[str, Any] = dict.fromkeys(
    ("accelerator", "devices", "strategy", "accumulate_grad_batches", "auto_select_gpus")
) | {"precision": 32}


def _defaults(cls: type) -> dict[str, Any]:
    """Each argument's default, 1.9.5's (in its order)."""
    parameters = inspect.signature(cls).parameters
    return {n: _LIGHTNING_1_9_DEFAULTS.get(n, parameters[n].default) for n in _PARSERS if n in parameters}


def _help(cls: type) -> dict[str, str]:
    """Each argument's line of the Trainer's docstring (its ``Args:``), without the default it names."""
    lines = re.findall(r"^    (\w+): (.*(?:\n {8}.*)*)", inspect.getdoc(cls) or "", re.M)
    return {name: re.sub(r"\s*\(default ``.*?``\)\.?$", "", " ".join(text.split())) for name, text in lines}


def add_argparse_args(cls: type, /, parent_parser: ArgumentParser, *, use_argument_group: bool = True) -> Any:
    """``parent_parser`` with a ``--name`` option for each Trainer argument a command line can give
    (in a group named after the class; ``use_argument_group=False``: a new parser holding them)."""
    if isinstance(parent_parser, _ArgumentGroup):
        raise RuntimeError("Please only pass an `ArgumentParser` instance.")
    group_name = f"{cls.__module__}.{cls.__qualname__}"
    parser: Any = (
        parent_parser.add_argument_group(group_name)
        if use_argument_group
        else ArgumentParser(parents=[parent_parser], add_help=False)
    )
    helps = _help(cls)
    for name, default in _defaults(cls).items():
        parse, optional_value = _PARSERS[name]
        flag = {"nargs": "?", "const": True} if optional_value else {}
        parser.add_argument(f"--{name}", dest=name, default=default, type=parse, help=helps.get(name), **flag)
    return parent_parser if use_argument_group else parser


def parse_argparser(cls: type, /, arg_parser: ArgumentParser | Namespace) -> Namespace:
    """The parsed command line (``arg_parser.parse_args()``), a flag left without a value as True."""
    args = arg_parser.parse_args() if isinstance(arg_parser, ArgumentParser) else arg_parser
    defaults = _defaults(cls)
    flags = {name for name, (_, optional) in _PARSERS.items() if optional and isinstance(defaults.get(name), bool)}
    return Namespace(**{k: (True if k in flags and v is None else v) for k, v in vars(args).items()})


def from_argparse_args(cls: type, /, args: ArgumentParser | Namespace, **kwargs: Any) -> Any:
    """``cls(...)`` from the parsed arguments that are its own (others are the program's), ``kwargs`` over them."""
    if isinstance(args, ArgumentParser):
        args = parse_argparser(cls, args)
    valid = inspect.signature(cls).parameters
    params = {name: value for name, value in vars(args).items() if name in valid}
    # 1.9.5's default of an argument trainmesh spells otherwise: the Trainer's own default, the same choice
    for name, default in _LIGHTNING_1_9_DEFAULTS.items():
        if name in params and params[name] == default and type(params[name]) is type(default):
            del params[name]
    return cls(**{**params, **kwargs})
