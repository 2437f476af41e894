"""``LightningCLI``: Lightning's command-line class, for a Lightning program's ``main.py``.

``LightningCLI(Model, DataModule)`` parses ``fit|validate|test|predict`` with ``--config``,
``--model.*``, ``--data.*``, ``--trainer.*``, ``--seed_everything``, ``--optimizer`` /
``--lr_scheduler`` and ``--ckpt_path``, builds the classes and runs the Trainer method, with
Lightning 2.6's constructor arguments and overridable methods (``add_arguments_to_parser``,
``before_instantiate_classes``, ``before_fit``/``after_fit``, ``configure_optimizers``, ...), so
a config file written for Lightning reads the same. It runs the subcommand and nothing more, as
Lightning's does; trainmesh's own :class:`~trainmesh.cli.CLI` also tests after ``fit`` and prints
tables.

As Lightning's, the model's and data module's hyperparameters are the parsed config's values with
``_instantiator`` (``load_from_checkpoint_support=False``: the ``__init__`` arguments as received).
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import warnings
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, Namespace, class_from_function
from torch.optim import Optimizer

from trainmesh.callbacks.base import Callback
from trainmesh.cli.lightning_parser import (
    ArgsType,
    LightningArgumentParser,
    LRSchedulerTypeTuple,
    ReduceLROnPlateau,
    instantiate_class,
)
from trainmesh.cli.save_config import SaveConfigCallback
from trainmesh.cli.trainer_arguments import add_trainer_arguments
from trainmesh.datamodule import DataModule
from trainmesh.hyperparameters import HyperparametersMixin
from trainmesh.module import Module
from trainmesh.seed import seed_everything
from trainmesh.trainer.trainer import Trainer
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.refusal import LightningOneName


class LightningCLI:
    """Parse the command line (or ``args``), build the model, data and Trainer, run the subcommand.

    Arguments as Lightning's: ``model_class`` / ``datamodule_class`` (None: any subclass, chosen
    with ``--model Class``), ``save_config_callback`` (None: no ``config.yaml`` in the log
    folder) and ``save_config_kwargs`` for it, ``trainer_class``, ``trainer_defaults`` (Trainer
    defaults; callbacks given here are always added), ``seed_everything_default`` (an int, True:
    seed 0 unless the config says, False: no seeding), ``parser_kwargs`` (for every parser, or per
    subcommand under its name), ``parser_class``, ``subclass_mode_model`` / ``subclass_mode_data``
    (``class_path`` / ``init_args`` choose a subclass), ``args`` (a list, dict or Namespace instead
    of ``sys.argv``), ``run`` (False: parse and build only; ``cli.model``, ``cli.datamodule`` and
    ``cli.trainer`` are then ready) and ``auto_configure_optimizers`` (``--optimizer`` and
    ``--lr_scheduler`` options that replace the model's ``configure_optimizers`` when given).
    Lightning 1.x's keywords (``save_config_filename`` / ``save_config_overwrite`` /
    ``save_config_multifile``, ``description``, ``env_prefix``, ``env_parse``) go where 1.9.5 put them
    (``save_config_kwargs``, ``parser_kwargs``), each with a ``LightningOneName`` warning.

    >>> # main.py
    >>> from trainmesh.cli import LightningCLI  # doctest: +SKIP
    >>> LightningCLI(MyModel, MyDataModule)  # doctest: +SKIP
    """

    def __init__(
        self,
        model_class: type[Module] | Any = None,
        datamodule_class: type[DataModule] | Any = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Any = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        parser_class: type[LightningArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
        **lightning1_kwargs: Any,
    ) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = dict(save_config_kwargs or {})
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        _take_lightning1_arguments(lightning1_kwargs, self.save_config_kwargs, self.parser_kwargs)
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support
        self.model_class = model_class
        self._model_class = model_class or Module
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data

        main_kwargs, subparser_kwargs = self._setup_parser_kwargs(self.parser_kwargs)
        self.setup_parser(run, main_kwargs, subparser_kwargs)
        self.parse_arguments(self.parser, args)
        self._parse_ckpt_path()
        self.subcommand = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # ---- the parser ---------------------------------------------------------------------------
    def _setup_parser_kwargs(self, parser_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        names = self.subcommands().keys()
        return (
            {k: v for k, v in parser_kwargs.items() if k not in names},
            {k: v for k, v in parser_kwargs.items() if k in names},
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """A parser with ``-c/--config``; ``kwargs`` go to ``parser_class``."""
        from trainmesh.version import __version__

        kwargs.setdefault("dump_header", [f"trainmesh=={__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument(
            "-c", "--config", action=ActionConfigFile, help="Path to a configuration file in json or yaml format."
        )
        return parser

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        self.parser = self.init_parser(**main_kwargs)
        if add_subcommands:
            self._subcommand_method_arguments: dict[str, list[str]] = {}
            self._add_subcommands(self.parser, **subparser_kwargs)
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--seed_everything",
            type=bool | int,
            default=self.seed_everything_default,
            help="An int: seed_everything(int) before the classes are built; true: seed 0; false: no seeding.",
        )

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_trainer_arguments(parser, self.trainer_class)  # Lightning's types, defaults and order
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        # Without a datamodule class the model's own *_dataloader methods may supply the data.
        parser.add_lightning_class_args(
            self._datamodule_class,
            "data",
            subclass_mode=self.subclass_mode_data,
            required=self.datamodule_class is not None,
        )

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser._optimizers:  # unless add_arguments_to_parser added its own
                parser.add_optimizer_args((Optimizer,))
            if not parser._lr_schedulers:
                parser.add_lr_scheduler_args(LRSchedulerTypeTuple)
        self.link_optimizers_and_lr_schedulers(parser)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add arguments (``parser.add_lightning_class_args(EarlyStopping, "early_stopping")``)
        or links (``parser.link_arguments("data.num_classes", "model.num_classes")``)."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands, each with the Trainer method's arguments that are not options (Lightning
        2.6's, and 1.9's ``tune`` for a 1.x program's ``--trainer.auto_lr_find true``)."""
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "dataloaders", "datamodule"},
            "test": {"model", "dataloaders", "datamodule"},
            "predict": {"model", "dataloaders", "datamodule"},
            # pytorch-lightning 1.9's: Trainer.tune (auto_lr_find / auto_scale_batch_size), which 2.0 removed
            "tune": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
        }

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        subcommands = parser.add_subcommands()
        trainer_class = (
            self.trainer_class if isinstance(self.trainer_class, type) else class_from_function(self.trainer_class)
        )
        for subcommand in self.subcommands():
            description = (inspect.getdoc(getattr(trainer_class, subcommand)) or "").split("\n")[0] or None
            subparser_kwargs = kwargs.get(subcommand, {})
            subparser_kwargs.setdefault("description", description)
            subcommand_parser = self._prepare_subcommand_parser(trainer_class, subcommand, **subparser_kwargs)
            self._subcommand_parsers[subcommand] = subcommand_parser
            subcommands.add_subcommand(subcommand, subcommand_parser, help=description)

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        parser = self.init_parser(**kwargs)
        self._add_arguments(parser)
        # The method's other arguments (ckpt_path, verbose) become options of the subcommand.
        skip: set[str | int] = set(self.subcommands()[subcommand])
        self._subcommand_method_arguments[subcommand] = parser.add_method_arguments(klass, subcommand, skip=skip)
        return parser

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """Link each optimizer or scheduler group registered with a ``link_to`` key to that key."""
        for key, (class_type, link_to) in {**parser._optimizers, **parser._lr_schedulers}.items():
            if link_to == "AUTOMATIC":
                continue
            if isinstance(class_type, tuple):
                parser.link_arguments(key, link_to)
            else:
                parser.link_arguments(key, link_to, compute_fn=functools.partial(_with_class_path, class_type))

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse ``args`` (the command line when None) into ``self.config``."""
        if args is not None and len(sys.argv) > 1:
            rank_zero_warn(
                f"LightningCLI got args={args} and command-line arguments {sys.argv[1:]}; it parses args "
                "only. Pass one or the other"
            )
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def _parse_ckpt_path(self) -> None:
        """A checkpoint's saved hyperparameters become the model's arguments (the command line's win)."""
        if not self.config.get("subcommand"):
            return
        ckpt_path = self.config[self.config.subcommand].get("ckpt_path")
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        import torch

        hparams = dict(torch.load(ckpt_path, weights_only=True, map_location="cpu").get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        try:
            self.config = self.parser.parse_object({self.config.subcommand: {"model": hparams}}, self.config)
        except SystemExit:
            sys.stderr.write(f"the hyperparameters saved in {ckpt_path} do not fit the model's arguments\n")
            raise

    # ---- building the classes -----------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        """Override to run code before the classes are built."""

    def instantiate_classes(self) -> None:
        """Build the data module, the model and the Trainer from the config."""
        with warnings.catch_warnings():
            if self.load_from_checkpoint_support:
                # Lightning's CLI hands save_hyperparameters the config's values (a module argument as its
                # class_path dict), so it never warns that an argument is an nn.Module; the values stored
                # from the instances here are replaced by the config's just below.
                warnings.filterwarnings("ignore", message=r"Attribute '.*' is an instance of `nn.Module`")
            self.config_init = self.parser.instantiate(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        if self.load_from_checkpoint_support:
            self._give_config_hyperparameters()
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def _give_config_hyperparameters(self) -> None:
        """The model's and data module's saved hyperparameters become the config's values, as parsed,
        with ``_class_path`` (a subclass chosen) and Lightning's ``_instantiator``, as Lightning 2.6's CLI
        gives them to ``save_hyperparameters``; values set by an instantiation link stay as built."""
        import yaml

        dump = yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False, skip_none=False))
        dump = dump.get(str(self.subcommand), dump) if self.subcommand else dump
        for key, built in (("model", self.model), ("data", self.datamodule)):
            if isinstance(built, HyperparametersMixin):
                built._given_hyperparameters(dump.get(key) or {}, "lightning.pytorch.cli.instantiate_module")

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are built."""

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, from its config section and ``kwargs``, with the configured callbacks."""
        extra_callbacks = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return self._instantiate_trainer(trainer_config, extra_callbacks)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        given = config.get("callbacks")
        config["callbacks"] = [] if given is None else (list(given) if isinstance(given, list) else [given])
        config["callbacks"].extend(callbacks)
        if "callbacks" in self.trainer_defaults:
            value = self.trainer_defaults["callbacks"]
            config["callbacks"] += value if isinstance(value, list) else [value]
        if self.save_config_callback and not config.get("fast_dev_run", False):
            config["callbacks"].append(
                self.save_config_callback(
                    self._parser(self.subcommand),
                    self.config.get(str(self.subcommand), self.config),
                    **self.save_config_kwargs,
                )
            )
        trainer: Trainer = self.trainer_class(**config)
        return trainer

    def _parser(self, subcommand: str | None) -> LightningArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    @staticmethod
    def configure_optimizers(lightning_module: Module, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
        """What the model's ``configure_optimizers`` returns when ``--optimizer`` is given; override
        to change it."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor},
            }
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        if not self.auto_configure_optimizers:
            return
        parser = self._parser(subcommand)
        optimizers = _automatic(Optimizer, parser._optimizers)
        schedulers = _automatic(LRSchedulerTypeTuple, parser._lr_schedulers)
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                f"{type(self).__name__} builds configure_optimizers from at most one optimizer and one scheduler "
                f"registered as 'AUTOMATIC'; found {optimizers + schedulers}. Link the groups to the model "
                "(add_optimizer_args(..., link_to='model.optimizer')) and write configure_optimizers yourself"
            )
        optimizer_init = self._init_of(parser._optimizers[optimizers[0]][0], optimizers[0])
        if not optimizer_init:
            return  # the option exists, but no --optimizer was given: the model's own stays
        scheduler_init = self._init_of(parser._lr_schedulers[schedulers[0]][0], schedulers[0]) if schedulers else None
        if type(self.model).configure_optimizers is not Module.configure_optimizers:
            rank_zero_warn(
                f"{type(self.model).__name__}.configure_optimizers is replaced by {type(self).__name__}"
                ".configure_optimizers, since --optimizer was given"
            )
        optimizer = instantiate_class(self.model.parameters(), optimizer_init)
        scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
        method = functools.partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        functools.update_wrapper(method, self.configure_optimizers)
        self.model.configure_optimizers = types.MethodType(method, self.model)

    def _init_of(self, class_type: type | tuple[type, ...], key: str) -> Any:
        init = self._get(self.config_init, key)
        return init if isinstance(class_type, tuple) else _with_class_path(class_type, init)

    def _get(self, config: Namespace, key: str, default: Any = None) -> Any:
        """``key`` of the config, inside the subcommand's section when there is one."""
        return config.get(str(self.subcommand), config).get(key, default)

    # ---- running ------------------------------------------------------------------------------
    def _run_subcommand(self, subcommand: str) -> None:
        """``before_<subcommand>()``, the Trainer method (or this class's of that name), ``after_<subcommand>()``."""
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        run = getattr(self, subcommand, getattr(self.trainer, subcommand))
        run(**self._prepare_subcommand_kwargs(subcommand))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        given = self.config_init[subcommand]
        kwargs = {k: v for k, v in given.items() if k in self._subcommand_method_arguments[subcommand]}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs

    def _set_seed(self) -> None:
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        seed = seed_everything(None if seed is True else seed, workers=True)
        # The config records the seed used, so a saved config.yaml reruns the same numbers.
        (self.config[self.subcommand] if self.subcommand else self.config)["seed_everything"] = seed


# Lightning 1.8/1.9's LightningCLI arguments, and the key of save_config_kwargs / parser_kwargs each became
# (pytorch-lightning 1.9.5 took them with a deprecation notice and moved them so; 2.0 removed them).
LIGHTNING1_ARGUMENTS = {
    "save_config_filename": ("save_config_kwargs", "config_filename"),
    "save_config_overwrite": ("save_config_kwargs", "overwrite"),
    "save_config_multifile": ("save_config_kwargs", "multifile"),
    "description": ("parser_kwargs", "description"),
    "env_prefix": ("parser_kwargs", "env_prefix"),
    "env_parse": ("parser_kwargs", "default_env"),
}


def _take_lightning1_arguments(
    given: dict[str, Any], save_config_kwargs: dict[str, Any], parser_kwargs: dict[str, Any]
) -> None:
    """Move Lightning 1.x's arguments into the dicts that hold them today, as 1.9.5 did, each with
    today's spelling in a ``LightningOneName`` warning; any other keyword is a ``TypeError``."""
    unknown = sorted(set(given) - set(LIGHTNING1_ARGUMENTS))
    if unknown:
        raise TypeError(f"LightningCLI got unexpected keyword arguments {unknown}")
    for name, value in given.items():
        where, key = LIGHTNING1_ARGUMENTS[name]
        (save_config_kwargs if where == "save_config_kwargs" else parser_kwargs)[key] = value
        warnings.warn(
            f"LightningCLI({name}=...) is Lightning 1.x's name; today: LightningCLI({where}={{{key!r}: ...}})",
            LightningOneName,
            stacklevel=3,
        )


def _automatic(base: type | tuple[type, ...], registered: dict[str, tuple[type | tuple[type, ...], str]]) -> list[str]:
    """The registered groups of ``base``'s kind that the CLI itself is to apply (link_to AUTOMATIC)."""
    found = []
    for key, (classes, link_to) in registered.items():
        classes = classes if isinstance(classes, tuple) else (classes,)
        if link_to == "AUTOMATIC" and any(issubclass(c, base) for c in classes):
            found.append(key)
    return found


def _with_class_path(class_type: type, init_args: Any = None) -> dict[str, Any]:
    if isinstance(init_args, Namespace):
        init_args = init_args.as_dict()
    return {"class_path": f"{class_type.__module__}.{class_type.__name__}", "init_args": init_args or {}}
