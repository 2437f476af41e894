"""``trainmesh``: fit, validate, test or predict any Module on any DataModule from the shell.

Usage::

    trainmesh fit                                    # the demo: an MLP on scikit-learn's digits
    trainmesh fit --model my_pkg.models:Net --model.hidden_dim 64 --data my_pkg.data:Images \\
                  --data.batch_size 64 --trainer.max_epochs 5 --trainer.devices 2
    trainmesh fit --model my_pkg.models:Net --help   # lists Net's own arguments
    trainmesh test --ckpt_path lightning_logs/version_0/checkpoints/last.ckpt
    trainmesh checkpoint inspect lightning_logs/version_0/checkpoints/last.ckpt
    trainmesh estimate --model my_pkg.models:Net --world_size 8 --precision bf16-mixed   # memory per rank
    trainmesh scale --max_processes 2 --link infiniband-ndr   # measure 1, 2 processes; project to 8 ... 1024
    trainmesh project --parameters 117e6 --compute_ms 15 --strategy ddp --strategy fsdp   # project only
    trainmesh fit --print_config > run.yaml; trainmesh fit --config run.yaml

The model and data classes are chosen first (from ``--model`` / ``--data`` and any ``--config``),
then their ``__init__`` arguments become ``--model.<arg>`` / ``--data.<arg>`` options next to
every Trainer argument as ``--trainer.<arg>``. A config file has the same shape, with
``model``, ``data`` and ``trainer`` sections (``trainmesh fit --help`` shows an example).

>>> main(["fit", "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"])  # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmesh.utilities.class_paths import CLIError, check_model_class, find_class_paths, import_class

if TYPE_CHECKING:
    from trainmesh.trainer.trainer import Trainer

FIT_MAX_EPOCHS = 20

_COMMANDS = {
    "fit": "Train the model (validating as it goes), then test it and report the metrics.",
    "validate": "Run the validation set once and report the metrics.",
    "test": "Run the test set once and report the metrics.",
    "predict": "Run predict_step over the predict data and save the outputs with torch.save.",
}

_EPILOG = """\
classes:
  --model and --data take package.module:ClassName (or package.module.ClassName);
  the current directory is searched too. Their __init__ arguments become
  --model.<arg> and --data.<arg>: `trainmesh {command} --model my.mod:Net --help`
  lists Net's. Later sources win, left to right, config files included.

config files (--config FILE, repeatable; `--print_config > run.yaml` writes one):
  model:
    class_path: trainmesh.demo:DigitsClassifier   # same as --model
    hidden_dim: 64                                # same as --model.hidden_dim
  data:
    class_path: trainmesh.data.digits:DigitsDataModule
    batch_size: 64
  trainer:
    max_epochs: 5
  seed: 0

errors:
  A mistake in the arguments prints `error: ...` and exits with status 2; pass
  --traceback (or set TRAINMESH_TRACEBACK=1) to see where it was raised.
"""

# The Trainer's docstring has no per-argument section, so the common options get their help here.
_TRAINER_HELP = {
    "accelerator": "Where to run: 'cpu', 'cuda', 'mps' or 'auto'.",
    "devices": "How many devices (or which ids, or 'auto') per node.",
    "num_nodes": "How many machines take part.",
    "strategy": "How to parallelize: 'auto', 'ddp', 'fsdp', ... (see trainmesh.strategies).",
    "precision": "Numeric precision, e.g. '32-true', 'bf16-mixed', '16-mixed'.",
    "max_epochs": "Stop after this many epochs (null: 1000, or unbounded when max_steps is set).",
    "max_steps": "Stop after this many optimizer steps (-1: no limit).",
    "limit_train_batches": "Batches per training epoch: a count (int) or a fraction (float).",
    "limit_val_batches": "Batches per validation run: a count (int) or a fraction (float).",
    "limit_test_batches": "Batches per test run: a count (int) or a fraction (float).",
    "limit_predict_batches": "Batches per predict run: a count (int) or a fraction (float).",
    "callbacks": "Callbacks to add, e.g. --trainer.callbacks+=EarlyStopping --trainer.callbacks.monitor=val_loss.",
    "logger": "true: TensorBoard (CSV without tensorboard installed) in <default_root_dir>/lightning_logs/version_N; false: none.",
    "default_root_dir": "Folder for logs and checkpoints (null: the current directory).",
    "enable_progress_bar": "Show a progress bar while running.",
    "enable_checkpointing": "Save checkpoints (best and last) during fit.",
    "fast_dev_run": "Run this many batches of every stage (true: 1) as a smoke test; no logs or checkpoints.",
}


def main(argv: list[str] | None = None, *, cli: Any = None) -> int:
    """Run the ``trainmesh`` command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    0 on success, 2 for a mistake in the arguments or the run's settings (message on stderr),
    130 when interrupted. ``cli``: a :class:`trainmesh.cli.CLI` whose fixed classes replace
    ``--model``/``--data``, and which receives the trainer, model and datamodule it built.

    >>> main(["--help"])  # doctest: +SKIP
    0
    """
    args = list(sys.argv[1:] if argv is None else argv)
    env_traceback = os.environ.get("TRAINMESH_TRACEBACK", "").lower() in ("1", "true", "yes")
    show_traceback = "--traceback" in args or env_traceback
    args = [arg for arg in args if arg != "--traceback"]
    try:
        return _run(args, cli)
    except KeyboardInterrupt:
        print("\ninterrupted (checkpoints already written are complete)", file=sys.stderr)
        return 130
    except SystemExit as exit_:  # --help, --print_config and argument errors end this way
        return _exit_status(exit_.code)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        # trainmesh reports a user's mistake with these types (what, why, fix), so the message
        # is the useful part; a genuine bug still shows its traceback with --traceback.
        if show_traceback:
            raise
        print(f"error: {err}", file=sys.stderr)
        print("(run again with --traceback for the full traceback)", file=sys.stderr)
        return 2


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(args: list[str], cli: Any = None) -> int:
    if args and args[0] == "checkpoint":
        from trainmesh.cli.checkpoint_command import run_checkpoint_command

        return run_checkpoint_command(args[1:])
    if args and args[0] == "estimate":
        from trainmesh.cli.estimate_command import run_estimate_command

        return run_estimate_command(args[1:])
    if args and args[0] == "scale":  # its own parser: it launches processes, it builds no Trainer
        from trainmesh.scaling.command import run_scale_command

        return run_scale_command(args[1:])
    if args and args[0] == "project":  # the same model without processes: from given numbers
        from trainmesh.scaling.project_command import run_project_command

        return run_project_command(args[1:])
    command = args[0] if args and args[0] in _COMMANDS else None
    if command is None and cli is None:  # `trainmesh --help`, `--version`, a mistake: no classes, no torch
        build_parser({}, {}).parse_args(args)
        return 2  # not reached: without a command the parser exits (help, version or error)
    class_args = args[1:] if command else []
    if cli is None:
        class_args, class_paths = find_class_paths(class_args)
        classes = {role: import_class(path, role) for role, path in class_paths.items()}
    else:  # a user's script fixed them: CLI(Model, DataModule)
        classes = cli.classes
        class_paths = {role: f"{cls.__module__}:{cls.__qualname__}" for role, cls in classes.items()}
    check_model_class(classes["model"], class_paths["model"])
    parser = build_parser(classes, class_paths, prog=cli.prog if cli is not None else "trainmesh")
    config = parser.parse_args(([command] + class_args) if command else args)
    command = config.subcommand
    return _execute(command, parser, config, cli)


# ---- stage two (stage one, the classes, is trainmesh.utilities.class_paths): the full parser ------------
class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's YAML example as written; jsonargparse's formatter is mixed in below."""


def build_parser(classes: dict[str, type], class_paths: dict[str, str], *, prog: str = "trainmesh") -> Any:
    """The ``trainmesh`` parser, with ``fit``/``validate``/``test``/``predict`` built for ``classes``
    (``model``, and ``data`` unless the model brings its own dataloaders); without ``classes``,
    the commands' list alone (`trainmesh --help`), which imports no torch."""
    from jsonargparse import ArgumentParser, DefaultHelpFormatter

    from trainmesh.cli.estimate_command import SUMMARY as ESTIMATE
    from trainmesh.cli.summaries import CHECKPOINT_SUMMARY as SUMMARY
    from trainmesh.scaling.summaries import PROJECT_SUMMARY as PROJECT
    from trainmesh.scaling.summaries import SCALE_SUMMARY as SCALE
    from trainmesh.version import __version__

    formatter = type("HelpFormatter", (DefaultHelpFormatter, _HelpFormatter), {})
    # allow_abbrev=False on every parser: argparse would otherwise take --trainer.max_epoch for
    # --trainer.max_epochs without a word (jsonargparse 4.x only warns that this is deprecated).
    parser = (_command_parser_class() if classes else ArgumentParser)(
        prog=prog,
        description="Train and evaluate trainmesh models.",
        formatter_class=formatter,
        epilog=_EPILOG.format(command="fit"),
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subcommands = parser.add_subcommands(dest="subcommand", required=True)
    for command, summary in _COMMANDS.items():
        usage = (
            f"{prog} {command} [--config FILE] [--model CLASS] [--model.<arg> VALUE] [--data CLASS] "
            "[--data.<arg> VALUE] [--trainer.<arg> VALUE] [options]"
        )
        sub = (_command_parser_class() if classes else ArgumentParser)(
            description=summary,
            usage=usage,
            formatter_class=formatter,
            epilog=_EPILOG.format(command=command),
            allow_abbrev=False,
        )
        if classes:
            _add_command_arguments(sub, command, classes, class_paths)
        subcommands.add_subcommand(command, sub, help=summary)
    # Listed for --help only: `_run` hands `trainmesh checkpoint ...` to its own parser (whose
    # nested subcommands jsonargparse cannot attach here after they are built).
    subcommands.add_subcommand("checkpoint", ArgumentParser(description=SUMMARY, allow_abbrev=False), help=SUMMARY)
    subcommands.add_subcommand("estimate", ArgumentParser(description=ESTIMATE, allow_abbrev=False), help=ESTIMATE)
    subcommands.add_subcommand("scale", ArgumentParser(description=SCALE, allow_abbrev=False), help=SCALE)
    subcommands.add_subcommand("project", ArgumentParser(description=PROJECT, allow_abbrev=False), help=PROJECT)
    return parser


@functools.cache
def _command_parser_class() -> type:
    """A parser whose --print_config writes the seeds' Trainer spellings (gpus=...) as today's."""
    from jsonargparse import ArgumentParser

    from trainmesh.trainer.construction import in_todays_spelling

    class CommandParser(ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            from trainmesh.cli.lightning_paths import LOADER_MODE, register_loader

            register_loader()
            # YAML, with a Lightning config's class paths (lightning.pytorch.strategies.X) read as trainmesh's
            kwargs.setdefault("parser_mode", LOADER_MODE)
            super().__init__(*args, **kwargs)

        def dump(self, namespace: Any, *args: Any, **kwargs: Any) -> str:
            # The old arguments are hidden (help=SUPPRESS), so the dump leaves them out; their
            # translation must land in today's arguments first, or the printed config would
            # silently describe a different run (gpus=0 is a CPU run, not accelerator='auto').
            if "trainer" in namespace:
                namespace = namespace.clone()
                for key, value in in_todays_spelling(namespace["trainer"], check_cuda=False).items():
                    namespace[f"trainer.{key}"] = value
            return super().dump(namespace, *args, **kwargs)

    return CommandParser


def _add_command_arguments(parser: Any, command: str, classes: dict[str, type], class_paths: dict[str, str]) -> None:
    from jsonargparse import ActionConfigFile, ActionYesNo

    from trainmesh.cli.trainer_arguments import add_object_arguments
    from trainmesh.trainer import Trainer
    from trainmesh.trainer.construction import OLD_ARGUMENTS

    parser.add_argument("--config", action=ActionConfigFile, help="A YAML config file (see below); repeatable.")
    parser.add_argument("--seed", type=int | None, default=0, help="Seed every random generator (null: do not seed).")
    ckpt_help = (
        "Resume from this checkpoint ('last' or a path)."
        if command == "fit"
        else "Load the weights from this checkpoint ('best', 'last' or a path)."
    )
    parser.add_argument("--ckpt_path", type=str | None, default=None, help=ckpt_help)
    if command == "fit":
        parser.add_argument(
            "--test",
            action=ActionYesNo(yes_prefix="", no_prefix="no_"),
            nargs="?",
            default=True,
            help="Test the trained model after fitting (--no_test or --test false to skip).",
        )
    if command == "predict":
        parser.add_argument(
            "--output",
            type=str | None,
            default=None,
            help="Where to torch.save the predictions "
            "(default: predictions.pt in trainer.default_root_dir or the current directory).",
        )
    for role, title in (("model", "Model"), ("data", "Data")):
        if role in classes:  # CLI(Model) alone: the model defines its own *_dataloader methods
            _add_class_group(parser, role, title, classes[role], class_paths[role])

    group = parser.add_argument_group("Trainer", description="Arguments of trainmesh.Trainer.")
    add_object_arguments(parser, group, Trainer)
    # default_root_dir stays the Trainer's own default (the current directory), so the CLI and
    # the Python API both log to ./lightning_logs/version_N.
    if command == "fit":
        parser.set_defaults({"trainer.max_epochs": FIT_MAX_EPOCHS})
    for action in parser._actions:  # argparse keeps no public list of actions; help text only
        name = action.dest.removeprefix("trainer.")
        if not action.dest.startswith("trainer."):
            continue
        if name in OLD_ARGUMENTS:
            # Accepted from old configs and flags (the Trainer translates them with a notice),
            # but neither offered in --help nor written by --print_config.
            action.help = argparse.SUPPRESS
        elif name in _TRAINER_HELP and not action.help:
            action.help = _TRAINER_HELP[name]


def _add_class_group(parser: Any, role: str, title: str, cls: type, path: str) -> None:
    summary = (cls.__doc__ or "").strip().split("\n")[0]
    group = parser.add_argument_group(f"{title}: {path}", description=summary or None)
    group.add_argument(
        f"--{role}.class_path",
        type=str,
        default=path,
        help=f"The {role} class as package.module:ClassName; --{role} for short.",
    )
    added = group.add_class_arguments(cls, role, as_group=False, instantiate=False, fail_untyped=False)
    if f"{role}.class_path" in added:
        raise CLIError(f"{cls.__name__}.__init__ has an argument named 'class_path', which the CLI reserves; rename it")


# ---- running a command ------------------------------------------------------------------------
def _execute(command: str, parser: Any, config: Any, cli: Any = None) -> int:
    from trainmesh.seed import seed_everything
    from trainmesh.trainer import Trainer

    settings = config[command]
    if settings.seed is not None:
        seed_everything(settings.seed, workers=True)  # before any weights are initialized
    # Builds what the settings describe as class_path entries (callbacks, typed model arguments).
    built = parser.instantiate(config)[command]
    model = _build_from_group(built.model, "model")
    datamodule = _build_from_group(built.data, "data") if "data" in built else None
    trainer = Trainer(**_with_last_checkpoint(command, built.trainer.as_dict()))
    if cli is not None:  # the user's script reads them after the run, as LightningCLI offers
        cli.trainer, cli.model, cli.datamodule = trainer, model, datamodule
    runner = {"fit": _fit, "validate": _evaluate, "test": _evaluate, "predict": _predict}[command]
    runner(command, trainer, model, datamodule, settings)
    return 0


def _with_last_checkpoint(command: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """``trainmesh fit``'s checkpointing: where the command names no checkpoint callback, a
    ``ModelCheckpoint(save_last=True)``, so that the run leaves ``last.ckpt`` for ``trainmesh test
    --ckpt_path .../last.ckpt`` and ``--ckpt_path last``. (The Trainer's own default is Lightning's
    ``ModelCheckpoint()``, which writes none: this command is trainmesh's, not Lightning's.)"""
    from trainmesh.callbacks import Checkpoint, ModelCheckpoint

    given = arguments.get("callbacks") or []
    given = list(given) if isinstance(given, list | tuple) else [given]
    if command != "fit" or arguments.get("enable_checkpointing") is False or arguments.get("fast_dev_run"):
        return arguments
    if any(isinstance(callback, Checkpoint) for callback in given):
        return arguments
    return {**arguments, "callbacks": [*given, ModelCheckpoint(save_last=True)]}


def _build_from_group(group: Any, role: str) -> Any:
    kwargs = {key: value for key, value in vars(group).items() if key != "class_path"}
    cls = import_class(group.class_path, role)
    return cls(**kwargs)


def _fit(command: str, trainer: Trainer, model: Any, datamodule: Any, settings: Any) -> None:
    trainer.fit(model, datamodule=datamodule, ckpt_path=settings.ckpt_path)
    metrics: dict[str, Any] = {
        k: v for k, v in trainer.callback_metrics.items() if k.startswith("val_") and not k.endswith("_step")
    }
    if settings.test and _defines(datamodule, "test_dataloader"):
        metrics.update(_merge(trainer.test(model, datamodule=datamodule, verbose=False)))
    if not trainer.is_global_zero:
        return
    _print_metrics("Results", metrics)
    checkpoint = trainer.checkpoint_callback
    if checkpoint is None:
        print("checkpoints: none (checkpointing disabled)")
    else:
        print(f"best checkpoint: {checkpoint.best_model_path or '(none saved)'}")
        print(f"last checkpoint: {checkpoint.last_model_path or '(none saved)'}")
    print(f"logs: {os.path.abspath(trainer.log_dir)}" if trainer.logger is not None else "logs: none (logger disabled)")


def _evaluate(command: str, trainer: Trainer, model: Any, datamodule: Any, settings: Any) -> None:
    _warn_if_untrained(command, settings)
    run = trainer.validate if command == "validate" else trainer.test
    metrics = _merge(run(model, datamodule=datamodule, ckpt_path=settings.ckpt_path, verbose=False))
    if trainer.is_global_zero:
        _print_metrics("Validation" if command == "validate" else "Test", metrics)


def _predict(command: str, trainer: Trainer, model: Any, datamodule: Any, settings: Any) -> None:
    import torch

    _warn_if_untrained(command, settings)
    outputs = trainer.predict(model, datamodule=datamodule, ckpt_path=settings.ckpt_path)
    if not trainer.is_global_zero:
        return
    predictions = collate_predictions(outputs)
    output = Path(settings.output or Path(trainer.default_root_dir) / "predictions.pt").absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(predictions, output)
    size = f" ({len(predictions)} rows)" if isinstance(predictions, torch.Tensor) and predictions.dim() else ""
    print(f"predictions{size} written to {output}")


def collate_predictions(outputs: Any) -> Any:
    """One tensor from a list of per-batch tensors (one per dataloader for several loaders).

    Anything else (dicts, mixed types) is returned as it is, for ``torch.save`` to store.

    >>> import torch
    >>> collate_predictions([torch.tensor([1, 2]), torch.tensor([3])])
    tensor([1, 2, 3])
    """
    import torch

    if isinstance(outputs, list) and outputs and all(isinstance(o, list) for o in outputs):
        return [collate_predictions(o) for o in outputs]
    if isinstance(outputs, list) and outputs and all(isinstance(o, torch.Tensor) for o in outputs):
        if all(o.dim() == 0 for o in outputs):
            return torch.stack(outputs)
        if all(o.dim() > 0 and o.shape[1:] == outputs[0].shape[1:] for o in outputs):
            return torch.cat(outputs)
    return outputs


def _warn_if_untrained(command: str, settings: Any) -> None:
    if settings.ckpt_path is None:
        print(f"note: no --ckpt_path given, so {command} runs on freshly initialized weights", file=sys.stderr)


def _defines(datamodule: Any, method: str) -> bool:
    from trainmesh.datamodule import DataModule

    impl = getattr(type(datamodule), method, None)
    return impl is not None and impl is not getattr(DataModule, method, None)


def _merge(results: list[dict[str, float]]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for result in results:
        merged.update(result)
    return merged


def _print_metrics(title: str, metrics: dict[str, Any]) -> None:  # floats or 0-dim tensors
    from trainmesh.seed import import_leaving_rng

    import_leaving_rng("rich.console")  # its first import draws from Python's random
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{float(value):.4f}")
    if not metrics:
        table.add_row("(no metrics logged)", "")
    # Built per call so the table goes to whatever sys.stdout is now (tests capture it).
    Console(file=sys.stdout, highlight=False).print(table)
