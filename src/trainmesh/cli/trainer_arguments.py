"""The ``--trainer.*`` options of ``LightningCLI``, parsed as Lightning 2.6's CLI parses them.

jsonargparse builds the options from the Trainer's ``__init__`` annotations. Where trainmesh's
Trainer takes more than one kind of object (a callback is any object with Lightning's callback
methods, a strategy any object with the Strategy protocol's members), its annotation says so, and
jsonargparse cannot turn ``--trainer.callbacks+=LearningRateMonitor`` or ``strategy: {class_path:
DDPStrategy}`` into an object from that. Lightning's annotations name base classes
(``list[Callback] | Callback | None``), so jsonargparse resolves a short class name among their
subclasses and takes its ``init_args``. This module gives the CLI those annotations, with
trainmesh's base classes in Lightning's places, Lightning's defaults (``None`` where Lightning's
Trainer fills in its own, as trainmesh's does for ``None``) and Lightning's order, so that a
config file reads and is written as Lightning's. trainmesh's own arguments (``max_restarts``,
``compile``, ``watchdog_timeout``, ``fault_tolerance``) follow Lightning's; Lightning 1.x's stay
accepted but are left out of ``--help`` and of a saved config.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainmesh.cli.lightning_paths import SHORT_NAME_PACKAGES

if TYPE_CHECKING:
    from trainmesh.cli.lightning_parser import LightningArgumentParser

# Lightning 2.6.6's Trainer arguments, in its order (tests/cli/test_lightning_cli_differential.py
# compares this with the installed Lightning).
LIGHTNING_ORDER = (
    "accelerator", "strategy", "devices", "num_nodes", "precision", "logger", "callbacks", "fast_dev_run",
    "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "limit_val_batches",
    "limit_test_batches", "limit_predict_batches", "overfit_batches", "val_check_interval",
    "check_val_every_n_epoch", "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing",
    "enable_progress_bar", "enable_model_summary", "accumulate_grad_batches", "gradient_clip_val",
    "gradient_clip_algorithm", "deterministic", "benchmark", "inference_mode", "use_distributed_sampler",
    "profiler", "detect_anomaly", "barebones", "plugins", "sync_batchnorm", "reload_dataloaders_every_n_epochs",
    "default_root_dir", "enable_autolog_hparams", "model_registry",
)  # fmt: skip

# trainmesh's own Trainer arguments, listed after Lightning's; any other is Lightning 1.x's.
TRAINMESH_OWN = ("max_restarts", "exact_resume", "compile", "watchdog_timeout", "fault_tolerance")


def _lightning_types() -> dict[str, tuple[Any, Any]]:
    """Each retyped argument's (annotation, default): Lightning 2.6's, with trainmesh's base classes."""
    from trainmesh.accelerator_types import Accelerator
    from trainmesh.callbacks.base import Callback
    from trainmesh.loggers.base import Logger
    from trainmesh.plugins.environments import ClusterEnvironment
    from trainmesh.plugins.io import CheckpointIO
    from trainmesh.plugins.layer_sync import LayerSync
    from trainmesh.plugins.precision import Precision
    from trainmesh.profilers.profiler import Profiler
    from trainmesh.strategies.lightning_face import LightningStrategyFace

    plugin = Precision | ClusterEnvironment | CheckpointIO | LayerSync
    precision = (
        Literal[64, 32, 16]
        | Literal[
            "transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
            "32-true", "64-true",
        ]
        | Literal["64", "32", "16", "bf16"]
        | None
    )  # fmt: skip
    timedelta = str | datetime.timedelta | dict[str, int] | None
    return {
        "accelerator": (str | Accelerator, "auto"),
        "strategy": (str | LightningStrategyFace, "auto"),
        "devices": (list[int] | str | int, "auto"),
        "precision": (precision, None),
        "logger": (Logger | Iterable[Logger] | bool | None, None),
        "callbacks": (list[Callback] | Callback | None, None),
        "max_time": (timedelta, None),
        "val_check_interval": (int | float | timedelta, None),
        "num_sanity_val_steps": (int | None, None),
        "log_every_n_steps": (int | None, None),
        "enable_checkpointing": (bool | None, None),
        "enable_progress_bar": (bool | None, None),
        "enable_model_summary": (bool | None, None),
        "deterministic": (bool | Literal["warn"] | None, None),
        "profiler": (Profiler | str | None, None),
        "plugins": (plugin | list[plugin] | None, None),
        "default_root_dir": (str | Path | None, None),
    }


def import_short_names() -> None:
    """Import the classes a config may name by short name (``LearningRateMonitor``, ``CSVLogger``,
    ``DDPStrategy``), as importing ``lightning.pytorch`` imports Lightning's. A class whose optional
    package is missing is left out, as it cannot be built."""
    for package_name in SHORT_NAME_PACKAGES:
        package = importlib.import_module(package_name)
        for name in getattr(package, "__all__", ()):
            try:
                getattr(package, name)
            except ImportError:
                continue


def add_trainer_arguments(parser: LightningArgumentParser, trainer_class: Any) -> None:
    """``--trainer.*``: ``trainer_class``'s arguments, those Lightning types more closely with
    Lightning's annotations and defaults, in Lightning's order."""
    import_short_names()
    forwarded = _forwarded_names(trainer_class)  # once: two signatures read (0.4 ms) per call
    retyped = {n: t for n, t in _lightning_types().items() if n in forwarded}
    parser.add_class_arguments(
        trainer_class, "trainer", fail_untyped=False, instantiate=False, sub_configs=True, skip=set(retyped)
    )
    add_retyped((parser.groups or {})["trainer"], retyped)
    shown = {f"trainer.{name}" for name in (*LIGHTNING_ORDER, *TRAINMESH_OWN)}
    for action in parser._actions:  # argparse keeps no public list of its actions
        if action.dest.startswith("trainer.") and action.dest not in shown:
            # still accepted; jsonargparse leaves a suppressed argument out of --help and of its dumps
            action.help = argparse.SUPPRESS
    _in_order(parser, LIGHTNING_ORDER)


def add_retyped(group: Any, retyped: dict[str, tuple[Any, Any]]) -> None:
    """``--trainer.<name>`` in ``group`` for each ``name: (annotation, default)`` of ``retyped``."""
    for name, (annotation, default) in retyped.items():
        action = group.add_argument(f"--trainer.{name}", type=annotation, default=default, sub_configs=True)
        # what jsonargparse gives an argument of Lightning's `add_class_arguments(Trainer, fail_untyped=False,
        # instantiate=True, sub_configs=True)`: a callback/logger class chosen by class_path may then take an
        # untyped parameter (`def __init__(self, output_dir)`), as under Lightning
        action.sub_add_kwargs = {"fail_untyped": False, "sub_configs": True, "instantiate": True}


def add_object_arguments(parser: Any, group: Any, trainer_class: Any) -> None:
    """``trainmesh fit``'s ``--trainer.*``: ``trainer_class``'s arguments, with ``accelerator``,
    ``strategy`` and ``plugins`` typed as ``LightningCLI`` types them (a name, or a class by its
    short name or full path with ``--trainer.strategy.<arg>`` or ``init_args``), in
    ``trainer_class``'s order."""
    import_short_names()
    objects = ("accelerator", "strategy", "plugins")
    retyped = {n: t for n, t in _lightning_types().items() if n in objects}
    group.add_class_arguments(
        trainer_class, "trainer", as_group=False, instantiate=False, fail_untyped=False, skip=set(retyped)
    )
    add_retyped(group, retyped)
    _in_order(parser, tuple(inspect.signature(trainer_class).parameters))


def _forwarded_names(trainer_class: Any) -> set[str]:
    """The retyped names ``trainer_class`` takes: its own parameters, and trainmesh's Trainer's where
    it forwards ``**kwargs`` (as jsonargparse follows them)."""
    from trainmesh.trainer.trainer import Trainer

    parameters = inspect.signature(trainer_class).parameters
    names = {n for n, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        names |= set(inspect.signature(Trainer).parameters)
    return names


def _in_order(parser: Any, order: tuple[str, ...]) -> None:
    """Order the ``trainer.*`` actions as ``order`` (Lightning's Trainer's arguments; then the
    others, as added): the parsed config, and so a saved ``config.yaml``, follows the actions' order."""
    rank = {f"trainer.{name}": i for i, name in enumerate(order)}
    actions = parser._actions
    slots = [i for i, a in enumerate(actions) if a.dest.startswith("trainer.")]
    ordered = sorted(enumerate(actions[i] for i in slots), key=lambda p: (rank.get(p[1].dest, len(rank)), p[0]))
    for slot, (_, action) in zip(slots, ordered):
        actions[slot] = action
