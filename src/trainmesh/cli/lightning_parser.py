"""``LightningArgumentParser``: the parser ``LightningCLI`` builds, with Lightning's extra methods.

A Lightning program that subclasses ``LightningCLI`` adds its own arguments in
``add_arguments_to_parser(parser)`` with these methods (``add_lightning_class_args`` for a
callback configurable from the command line, ``add_optimizer_args``, ``link_arguments`` from
jsonargparse). They take trainmesh's classes where Lightning's take its own: a
:class:`~trainmesh.Trainer`, :class:`~trainmesh.Module`, :class:`~trainmesh.DataModule` or
:class:`~trainmesh.Callback`. Importing this module imports jsonargparse (and only this one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from jsonargparse import ArgumentParser, Namespace, class_from_function, register_unresolvable_import_paths
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from trainmesh.callbacks.base import Callback
from trainmesh.datamodule import DataModule
from trainmesh.module import Module
from trainmesh.trainer.trainer import Trainer

# torch's classes name a private module as theirs (torch.optim.adam.Adam is torch.optim.Adam):
# let jsonargparse resolve `--optimizer Adam` to the public path, as Lightning does.
register_unresolvable_import_paths(torch)


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ReduceLROnPlateau with the metric it watches (``monitor``), so that
    ``--lr_scheduler ReduceLROnPlateau --lr_scheduler.monitor val_loss`` configures it all."""

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# As in Lightning: the CLI's schedulers are torch's and the ReduceLROnPlateau above (which knows
# its metric); torch's own ReduceLROnPlateau cannot be configured without one.
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerType = type[LRScheduler] | type[ReduceLROnPlateau]
ArgsType = list[str] | dict[str, Any] | Namespace | None
OptimizerCallable = Callable[[Iterable[Any]], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], LRScheduler | ReduceLROnPlateau]

_LIGHTNING_CLASSES = (Trainer, Module, DataModule, Callback)


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's parser with Lightning's methods for trainmesh's classes.

    ``env_prefix`` is Lightning's ``PL`` (``PL_TRAINER__MAX_EPOCHS``; read only with
    ``default_env=True``), so a program's environment works unchanged.
    """

    def __init__(
        self,
        *args: Any,
        description: str = "trainmesh Trainer command line tool",
        env_prefix: str = "PL",
        default_env: bool = False,
        **kwargs: Any,
    ) -> None:
        from trainmesh.cli.lightning_paths import LOADER_MODE, register_loader

        register_loader()
        # YAML, with a Lightning config's class paths (lightning.pytorch.callbacks.X) read as trainmesh's
        kwargs.setdefault("parser_mode", LOADER_MODE)
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []
        # What add_optimizer_args / add_lr_scheduler_args registered: key -> (class or classes, link_to).
        self._optimizers: dict[str, tuple[type | tuple[type, ...], str]] = {}
        self._lr_schedulers: dict[str, tuple[type | tuple[type, ...], str]] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in a process of its own (SaveConfigCallback's parser in a ddp_spawn worker):
        # jsonargparse's loader modes are registered per process, so this parser's is registered
        # again before it reads or writes a value (its save() raised KeyError: 'trainmesh_lightning_yaml').
        from trainmesh.cli.lightning_paths import register_loader

        register_loader()
        self.__dict__.update(state)

    def add_lightning_class_args(
        self, lightning_class: Any, nested_key: str, subclass_mode: bool = False, required: bool = True
    ) -> list[str]:
        """The ``__init__`` arguments of a Trainer, Module, DataModule or Callback class (or of a
        function returning one) as ``--<nested_key>.<arg>``; a callback's key is remembered, and
        the CLI adds the callback it builds to the Trainer's."""
        if callable(lightning_class) and not isinstance(lightning_class, type):
            lightning_class = class_from_function(lightning_class)
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, _LIGHTNING_CLASSES)):
            raise ValueError(
                f"add_lightning_class_args({lightning_class!r}): pass a subclass of trainmesh's Trainer, "
                "Module, DataModule or Callback, or a function that returns one"
            )
        if issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            added: list[str] = self.add_subclass_arguments(
                lightning_class, nested_key, fail_untyped=False, required=required
            )
            return added
        added = self.add_class_arguments(
            lightning_class,
            nested_key,
            fail_untyped=False,
            instantiate=not issubclass(lightning_class, Trainer),
            sub_configs=True,
        )
        return added

    def add_optimizer_args(
        self,
        optimizer_class: type[Optimizer] | tuple[type[Optimizer], ...] = (Optimizer,),
        nested_key: str = "optimizer",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """An optimizer's arguments (not ``params``) under ``nested_key``; a tuple allows any
        subclass (``--optimizer Adam --optimizer.lr 0.01``). ``AUTOMATIC``: the CLI makes the
        model's ``configure_optimizers`` return it; else it is linked to that parser key."""
        classes = optimizer_class if isinstance(optimizer_class, tuple) else (optimizer_class,)
        if not all(isinstance(c, type) and issubclass(c, Optimizer) for c in classes):
            raise ValueError(f"add_optimizer_args({optimizer_class!r}): pass torch.optim.Optimizer subclasses")
        self._add_torch_class(optimizer_class, nested_key, skip={"params"})
        self._optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(
        self,
        lr_scheduler_class: Any = LRSchedulerTypeTuple,
        nested_key: str = "lr_scheduler",
        link_to: str = "AUTOMATIC",
    ) -> None:
        """A learning-rate scheduler's arguments (not ``optimizer``) under ``nested_key``, as
        :meth:`add_optimizer_args` does for the optimizer."""
        classes = lr_scheduler_class if isinstance(lr_scheduler_class, tuple) else (lr_scheduler_class,)
        if not all(isinstance(c, type) and issubclass(c, LRSchedulerTypeTuple) for c in classes):
            raise ValueError(
                f"add_lr_scheduler_args({lr_scheduler_class!r}): pass torch.optim.lr_scheduler.LRScheduler "
                "subclasses or trainmesh.cli.ReduceLROnPlateau (torch's needs a monitor to be configured)"
            )
        self._add_torch_class(lr_scheduler_class, nested_key, skip={"optimizer"})
        self._lr_schedulers[nested_key] = (lr_scheduler_class, link_to)

    def _add_torch_class(self, cls: type | tuple[type, ...], nested_key: str, *, skip: set[str]) -> None:
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": skip}
        if isinstance(cls, tuple):
            self.add_subclass_arguments(cls, nested_key, **kwargs)
        else:
            self.add_class_arguments(cls, nested_key, sub_configs=True, **kwargs)


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """``init["class_path"]`` built with ``args`` (one value or a tuple) and ``init["init_args"]``,
    as Lightning's ``instantiate_class`` (``instantiate_class(model.parameters(), optimizer_init)``).

    >>> instantiate_class(1, {"class_path": "fractions.Fraction", "init_args": {"denominator": 4}})
    Fraction(1, 4)
    """
    kwargs = init.get("init_args", {})
    args = args if isinstance(args, tuple) else (args,)
    module_name, class_name = init["class_path"].rsplit(".", 1)
    module = __import__(module_name, fromlist=[class_name])
    return getattr(module, class_name)(*args, **kwargs)


def instantiate_module(class_type: type, config: dict[str, Any]) -> Any:
    """A module built from a saved ``config`` (its hyperparameters, as ``LightningCLI`` saved them),
    parsed against ``class_type``'s signature by jsonargparse, as Lightning's ``instantiate_module``
    (``load_from_checkpoint`` uses it for a model saved through the CLI). A ``"_class_path"`` key
    names a subclass of ``class_type`` to build instead.

    Args:
        class_type: the class (or base class, with ``"_class_path"``) to build.
        config: its init arguments by name, and optionally ``"_class_path"``.

    Examples:
        >>> instantiate_module(Namespace, {})  # doctest: +SKIP
    """
    parser = ArgumentParser(exit_on_error=False)
    if "_class_path" in config:
        parser.add_subclass_arguments(class_type, "module", fail_untyped=False)
        config = {
            "class_path": config["_class_path"],
            "dict_kwargs": {k: v for k, v in config.items() if k != "_class_path"},
        }
    else:
        parser.add_class_arguments(class_type, "module", fail_untyped=False)
    parsed = parser.parse_object({"module": config})
    return parser.instantiate_classes(parsed).module
