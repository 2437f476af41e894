"""Lightning 1.x's argparse face of the Trainer: ``Trainer.add_argparse_args(parser)``,
``Trainer.parse_argparser(parser)`` and ``Trainer.from_argparse_args(args, **overrides)``, which 2.0
removed (for ``LightningCLI``). Each argument is parsed as pytorch-lightning 1.9.5 parses it
(``tests/helpers/lightning_1_9_argparse.json`` records 1.9.5's, compared in
``tests/trainer/test_argparse_1x.py``); its default is trainmesh's Trainer's.

>>> import argparse
>>> from trainmesh import Trainer
>>> parser = Trainer.add_argparse_args(argparse.ArgumentParser())
>>> args = Trainer.parse_argparser(parser.parse_args(["--max_epochs", "3", "--fast_dev_run"]))
>>> args.max_epochs, args.fast_dev_run, args.precision
(3, True, '32-true')
"""

from __future__ import annotations

import inspect
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


# 1.9.5's arguments of its Trainer that trainmesh's takes, each with 1.9.5's parser ("?": the value
# may be left out, a flag meaning True).
_PARSERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    **dict.fromkeys(
        ("logger", "enable_checkpointing", "enable_progress_bar", "enable_model_summary", "sync_batchnorm"),
        (str_to_bool, True),
    ),
    **dict.fromkeys(
        (
            "auto_select_gpus",
            "inference_mode",
            "replace_sampler_ddp",
            "move_metrics_to_cpu",
            "benchmark",
            "detect_anomaly",
        ),
        (str_to_bool, True),
    ),
    **dict.fromkeys(("auto_lr_find", "auto_scale_batch_size"), (str_to_bool_or_str, True)),
    "track_grad_norm": (float, False),
    "fast_dev_run": (str_to_bool_or_int, True),
    **dict.fromkeys(
        ("gradient_clip_val", "overfit_batches", "val_check_interval")
        + tuple(f"limit_{s}_batches" for s in ("train", "val", "test", "predict")),
        (_int_or_float_type, False),
    ),
    **dict.fromkeys(
        (
            "num_nodes",
            "check_val_every_n_epoch",
            "accumulate_grad_batches",
            "max_epochs",
            "min_epochs",
            "max_steps",
            "min_steps",
            "reload_dataloaders_every_n_epochs",
            "log_every_n_steps",
            "num_sanity_val_steps",
            "ipus",
            "num_processes",
            "min_steps",
            "reload_dataloaders_every_n_epochs",
        ),
        (int, False),
    ),
    **dict.fromkeys(("gpus", "tpu_cores"), (_gpus_allowed_type, False)),
    "precision": (_precision_allowed_type, False),
    **dict.fromkeys(
        ("default_root_dir", "gradient_clip_algorithm", "devices", "max_time", "accelerator", "strategy")
        + ("resume_from_checkpoint", "multiple_trainloader_mode")
        + ("profiler", "plugins", "amp_backend", "amp_level"),
        (str, False),
    ),
}


def _defaults(cls: type) -> dict[str, Any]:
    defaults = {n: p.default for n, p in inspect.signature(cls).parameters.items() if n in _PARSERS}
    if defaults.get("precision", "") is None:  # the Trainer's None (Lightning 2's) means 1.9.5's default, 32
        defaults["precision"] = "32-true"
    return defaults


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
    for name, default in _defaults(cls).items():
        parse, optional_value = _PARSERS[name]
        flag = {"nargs": "?", "const": True} if optional_value else {}
        parser.add_argument(f"--{name}", dest=name, default=default, type=parse, **flag)
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
    return cls(**{**params, **kwargs})
