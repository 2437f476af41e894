"""``save_hyperparameters`` and ``hparams``, shared by Module and DataModule.

The arguments of the ``__init__`` that calls ``save_hyperparameters`` (or a dict/Namespace
given to it) become ``self.hparams``; the Trainer stores them in checkpoints and logs them
unless ``logger=False``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import sys
import types
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

from trainmesh.utilities.attribute_dict import AttributeDict
from trainmesh.utilities.rank_zero import rank_zero_warn


class HyperparametersMixin:
    """Gives a class ``save_hyperparameters()`` and ``hparams``.

    >>> class Data(HyperparametersMixin):
    ...     def __init__(self, batch_size: int = 32, data_dir: str = "data"):
    ...         self.save_hyperparameters(ignore="data_dir")
    >>> Data(batch_size=8).hparams
    "batch_size": 8
    """

    # The checkpoint keys Lightning reads and writes the hyperparameters under.
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: str | list[str] | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Store the arguments of the calling ``__init__`` in ``self.hparams`` and checkpoints.

        ``args``: names of some of those arguments, or one dict / ``argparse.Namespace`` to store
        instead of them; ``ignore`` leaves some out (big objects such as an already-built
        network); ``frame``: the ``__init__``'s frame when a helper of it calls this (Lightning's
        argument); ``logger=False`` keeps them out of the loggers (checkpoints still hold them).
        """
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or [])
        object.__setattr__(self, "_log_hyperparams", logger)
        if len(args) == 1 and not args[0]:
            return  # Lightning's: one empty argument (a container, 0, None, the name "") saves nothing
        # As Lightning's: one argument that is no name is the config (the names beside it unused);
        # several are ignored, and only the names among the arguments are saved
        configs = [arg for arg in args if not isinstance(arg, str)]
        if len(configs) > 1:
            args = tuple(arg for arg in args if isinstance(arg, str))
        if len(configs) == 1 and isinstance(configs[0], (Mapping, argparse.Namespace)):
            given = configs[0]
            found = vars(given) if isinstance(given, argparse.Namespace) else given
            # Lightning's checkpoint "hparams_name": the __init__ argument that holds the given object
            # (the arguments of the constructors up the calling chain, as Lightning collects them, so that a
            # helper method of __init__ calling this still finds the __init__ argument)
            from trainmesh.utilities.parsing import collect_init_args  # only for a dict or Namespace given

            caller = frame or inspect.currentframe().f_back  # type: ignore[union-attr]
            arguments: dict[str, Any] = {}
            for local in collect_init_args(caller, [], classes=(HyperparametersMixin,)) if caller else ():
                arguments.update(local)
            holders = [k for k, v in arguments.items() if k not in ignored and _same_object(v, given)]
            name = holders[0] if holders else None
        else:
            found = self._named_init_arguments(args, frame) if args or not configs else {}
            # Lightning's: "kwargs" for named arguments, or for all of them where there are some
            name = "kwargs" if configs or args or any(k not in ignored for k in found) else None
        self._store_hyperparameters(found, name, ignored)

    def _store_hyperparameters(self, found: Mapping[str, Any], name: str | None, ignored: set[str]) -> None:
        """What Lightning's ``utilities.parsing.save_hyperparameters`` does once it has the values and
        their checkpoint name (``hparams_name``): add them to ``hparams`` without the ignored names (also
        dropping those a base class's ``__init__`` saved before), warn of modules among them, and freeze
        a copy as ``hparams_initial``. It leaves the logger switch as it is (the function's callers do)."""
        if isinstance(found, MutableMapping) and not isinstance(found, dict):
            # Lightning keeps a mapping of another kind (a UserDict, a config object) as the hparams
            # themselves, its type too
            object.__setattr__(self, "_hparams", found)
        elif isinstance(self.hparams, dict):
            self.hparams.update({k: v for k, v in found.items() if k not in ignored})
        else:  # such a mapping saved before: replaced, as Lightning
            object.__setattr__(self, "_hparams", AttributeDict({k: v for k, v in found.items() if k not in ignored}))
        self.remove_ignored_hparams(sorted(ignored))
        for key, value in self.hparams.items():
            if isinstance(value, torch.nn.Module):  # Lightning's warning, in its words
                rank_zero_warn(
                    f"Attribute {key!r} is an instance of `nn.Module` and is already saved during checkpointing."
                    f" It is recommended to ignore them using `self.save_hyperparameters(ignore=[{key!r}])`."
                )
        object.__setattr__(self, "_hparams_name", name)
        object.__setattr__(self, "_hparams_initial", _frozen_copy(self.hparams))

    def _given_hyperparameters(self, config: Mapping[str, Any], instantiator: str) -> None:
        """Replace what ``save_hyperparameters()`` stored from the ``__init__`` arguments with the values
        a config gave them (``LightningCLI``'s, as parsed: a list where ``__init__`` received a tuple),
        with the config's ``_class_path`` and the ``_instantiator`` that rebuilds the object from them,
        as Lightning's ``_given_hyperparameters`` does. Nothing is done where nothing was saved, or where
        names were picked (``save_hyperparameters("lr")``: Lightning keeps those as received)."""
        if self.__dict__.get("_hparams_name") != "kwargs" or not isinstance(self.hparams, dict):
            return
        if "class_path" in config:  # a subclass chosen: its arguments, and the class, as Lightning keeps them
            config = {"_class_path": config["class_path"], **(config.get("init_args") or {})}
        saved = dict(self.hparams)
        given = {k: v for k, v in config.items() if k in saved or k == "_class_path"}
        self.hparams.clear()
        self._store_hyperparameters({**given, **{k: v for k, v in saved.items() if k not in given}}, "kwargs", set())
        self.hparams["_instantiator"] = instantiator
        self.__dict__["_hparams_initial"]["_instantiator"] = instantiator

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as ``save_hyperparameters`` stored them (later edits to
        ``hparams`` do not show here)."""
        return copy.deepcopy(self.__dict__.get("_hparams_initial", AttributeDict()))

    def remove_ignored_hparams(self, ignore_list: list[str]) -> None:
        """Drop names a base class saved that a subclass does not want kept (from ``hparams``;
        ``hparams_initial`` keeps them, as in Lightning)."""
        for name in ignore_list:
            self.hparams.pop(name, None)

    def _named_init_arguments(self, names: tuple[Any, ...], init_frame: types.FrameType | None) -> dict[str, Any]:
        if init_frame is None:
            frame = inspect.currentframe()
            # This method, save_hyperparameters, then the __init__ that called it.
            assert frame is not None and frame.f_back is not None and frame.f_back.f_back is not None
            init_frame = frame.f_back.f_back
            del frame
        # The arguments of each __init__ up the chain of constructors (a subclass's too, when a base
        # class's __init__ calls this), the outermost winning, as Lightning collects them.
        from trainmesh.utilities.parsing import collect_init_args

        args: dict[str, Any] = {}
        if dataclasses.is_dataclass(self):  # Lightning's: a dataclass module's init fields, from __post_init__
            args = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        for local in () if args else collect_init_args(init_frame, [], classes=(HyperparametersMixin,)):
            args.update(local)
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            # Lightning's words first where it has some: it takes a lone non-str argument as the config
            words = ""
            if len(bad) == 1 and isinstance(bad[0], (bool, int, float)):
                words = f"Primitives {(bool, int, float, str)} are not allowed. "
            elif len(bad) == 1:
                words = f"Unsupported config type of {type(bad[0])}. "
            raise ValueError(  # Lightning's type for what it cannot take as hyperparameters
                f"{words}save_hyperparameters takes argument names (str) or one dict/argparse.Namespace, got "
                f"{[type(b).__name__ for b in bad]}; pass e.g. save_hyperparameters('lr') or save_hyperparameters(vars(args))"
            )
        missing = [n for n in names if n not in args]
        if missing:
            raise ValueError(
                f"save_hyperparameters({', '.join(map(repr, names))}): {missing} are not "
                f"arguments of {type(self).__name__}.__init__; its arguments are {sorted(args)}"
            )
        return {n: args[n] for n in names} if names else args

    @property
    def hparams(self) -> AttributeDict:
        # Created on first use: a DataModule subclass need not call super().__init__(). A mapping of
        # another kind given to save_hyperparameters is kept itself, as Lightning keeps it.
        found = self.__dict__.get("_hparams")
        if found is None:
            found = AttributeDict()
            object.__setattr__(self, "_hparams", found)
        return found

    @property
    def log_hyperparams_enabled(self) -> bool:
        """Whether the Trainer logs the hyperparameters: True after ``save_hyperparameters()`` (False with
        ``logger=False``, or when only ``utilities.parsing.save_hyperparameters`` stored them, as Lightning)."""
        return bool(self.__dict__.get("_log_hyperparams", False))


def _frozen_copy(hparams: AttributeDict) -> AttributeDict:
    # A deep copy as Lightning keeps; a value that cannot be deep-copied (a lock, an open file)
    # is kept by reference rather than failing save_hyperparameters.
    try:
        return copy.deepcopy(hparams)
    except (TypeError, copy.Error, RuntimeError):
        return AttributeDict(hparams)


def _same_object(value: Any, given: Any) -> bool:
    """Lightning's ``v == hp`` for the holder of a given dict/Namespace, without comparing tensors."""
    return value is given or (isinstance(value, (Mapping, argparse.Namespace)) and value == given)


def hyperparameter_names(owner: Any) -> dict[str, str | None]:
    """The checkpoint's ``hparams_name`` entry of a module or data module (its
    ``CHECKPOINT_HYPER_PARAMS_NAME``), as Lightning writes it: where it saved non-empty hyperparameters."""
    if owner is None or not getattr(owner, "hparams", None) or "_hparams_name" not in owner.__dict__:
        return {}
    return {owner.CHECKPOINT_HYPER_PARAMS_NAME: owner.__dict__["_hparams_name"]}


def saved_hyperparameters(owner: Any) -> dict[str, Any]:
    """The checkpoint entries of a module's or data module's hyperparameters, as Lightning's
    ``dump_checkpoint`` writes them: none where it saved none; its ``hparams_name``; an omegaconf
    container kept as it is, with its type (``load_from_checkpoint`` gives the module that type back),
    anything else as a dict."""
    hparams = getattr(owner, "hparams", None)
    if owner is None or not hparams:
        return {}
    entries: dict[str, Any] = {**hyperparameter_names(owner), owner.CHECKPOINT_HYPER_PARAMS_KEY: dict(hparams)}
    omegaconf = sys.modules.get("omegaconf")  # a container's module is imported already: no import here
    if omegaconf is not None and isinstance(hparams, omegaconf.Container):
        entries |= {owner.CHECKPOINT_HYPER_PARAMS_KEY: hparams, owner.CHECKPOINT_HYPER_PARAMS_TYPE: type(hparams)}
    return entries


def hyperparameters_to_log(module: Any, datamodule: Any) -> dict[str, Any] | None:
    """What the Trainer sends the loggers' ``log_hyperparams`` at the start of each run, as
    Lightning's ``_log_hyperparams``: the ``hparams_initial`` of the module and the data module that
    called ``save_hyperparameters`` (not with ``logger=False``), merged; ``None`` where neither
    did (Lightning then calls no ``log_hyperparams``, and a CSVLogger writes no hparams.yaml).

    Raises:
        RuntimeError: a name both saved, with different values (Lightning's error).
    """
    owners = [o for o in (module, datamodule) if o is not None and o.__dict__.get("_log_hyperparams", False)]
    if not owners:
        return None
    saved = [o.hparams_initial for o in owners]
    if len(saved) == 2:
        clashing = [
            k for k in saved[0].keys() & saved[1].keys() if k != "_class_path" and _differ(saved[0][k], saved[1][k])
        ]
        if clashing:
            raise RuntimeError(
                f"Error while merging hparams: the keys {clashing} are present in both the LightningModule's "
                "and LightningDataModule's hparams but have different values."
            )
    merged = {k: v for hparams in saved for k, v in hparams.items()}
    # LightningCLI's own entry is not a hyperparameter
    return {k: v for k, v in merged.items() if k != "_class_path"}


def _differ(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return True
    if isinstance(a, torch.Tensor):  # Lightning compares tensors by identity
        return a is not b
    return bool(a != b)


def read_saved_checkpoint(
    checkpoint_path: Any, map_location: Any, hparams_file: Any, weights_only: bool | None, *, hparams_key: str
) -> dict[str, Any]:
    """The checkpoint ``load_from_checkpoint`` builds from: ``weights_only`` as Lightning passes it to
    ``torch.load`` (None: torch's default, True since torch 2.6: a checkpoint holding other classes
    stops with torch's error unless they are allowed with ``torch.serialization.add_safe_globals``,
    or pass False); with ``hparams_file`` (a logger's ``hparams.yaml`` or a ``tags.csv``), its
    hyperparameters replace the saved ones under ``hparams_key``, as Lightning's do."""
    from trainmesh.checkpoint import check_weights_only, load_checkpoint_file
    from trainmesh.hparams_files import load_hparams_file

    check_weights_only(checkpoint_path, weights_only)
    checkpoint = load_checkpoint_file(checkpoint_path, map_location=map_location)
    if hparams_file is not None:
        checkpoint[hparams_key] = load_hparams_file(hparams_file)
    return checkpoint


def load_saved_weights(module: Any, checkpoint: dict[str, Any], *, strict: bool | None, checkpoint_path: Any) -> None:
    """The weights ``load_from_checkpoint`` loads into the module it built, as Lightning's ``_load_state``:
    ``strict`` None takes the module's ``strict_loading`` (one the module set and ``strict`` given apart
    is a ``ValueError``), ``on_load_checkpoint(checkpoint)`` runs first (it may change the checkpoint),
    and a non-strict load warns of the missing and unexpected keys; an empty state dict warns."""
    strict_loading = module.strict_loading in (None, True)  # Lightning's getter: None (unset) is strict
    if vars(module).get("strict_loading") is not None and strict is not None and strict != strict_loading:
        raise ValueError(
            f"You set `.load_from_checkpoint(..., strict={strict!r})` which is in conflict with "
            f"`{type(module).__name__}.strict_loading={strict_loading!r}. Please set the same value for both of them."
        )
    strict = strict_loading if strict is None else strict
    module.on_load_checkpoint(checkpoint)
    keys = module.load_state_dict(checkpoint["state_dict"], strict=strict)
    if not strict and keys.missing_keys:
        rank_zero_warn(f"Found keys that are in the model state dict but not in the checkpoint: {keys.missing_keys}")
    if not strict and keys.unexpected_keys:
        rank_zero_warn(f"Found keys that are not in the model state dict but in the checkpoint: {keys.unexpected_keys}")
    if not checkpoint["state_dict"]:
        rank_zero_warn(f"The state dict in {checkpoint_path!r} contains no parameters.")


# Where checkpoints before pytorch-lightning 0.8 kept a module's hyperparameters (Lightning still reads them)
PAST_HPARAMS_KEYS = ("hparams", "module_arguments")


def constructor_arguments(
    cls: type, checkpoint: Mapping[str, Any], overrides: Mapping[str, Any], *, past_keys: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The keyword arguments ``load_from_checkpoint`` builds ``cls`` with, by Lightning's rule
    (``_load_state``): the saved hyperparameters, given as the one ``__init__`` argument they were
    saved from when the checkpoint names it (``save_hyperparameters(config)`` -> ``config=``), with the
    ``overrides`` replacing saved values (in such a dict too) and passed as well; only ``__init__``'s own arguments unless it takes ``**kwargs``."""
    # the overrides replace saved values first (inside a saved config dict too), then are passed as well
    past = {k: v for key in past_keys for k, v in checkpoint.get(key, {}).items()}  # the newer key wins
    # Lightning updates the saved object itself: an omegaconf container's interpolations then read the overrides
    held = copy.copy(checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY, {}))  # type: ignore[attr-defined]
    held.update(overrides)
    saved = {**past, **held}
    # LightningCLI's entries (the chosen class, Lightning's rebuilding function) are not arguments
    saved = {k: v for k, v in saved.items() if k not in ("_instantiator", "_class_path")}
    # The type they were saved as (an omegaconf container; a past checkpoint's name of one: AttributeDict)
    if saved_type := checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_TYPE):  # type: ignore[attr-defined]
        saved = (AttributeDict if isinstance(saved_type, str) else saved_type)(saved)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    names = {p.name for p in parameters if p.kind not in variadic}
    saved_as = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)  # type: ignore[attr-defined]
    arguments = {saved_as: saved} if saved_as in names else saved
    arguments = {**arguments, **overrides}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return arguments
    return {name: value for name, value in arguments.items() if name in names}


def datamodule_state(datamodule: Any, checkpoint: Mapping[str, Any]) -> Any:
    """The data module's saved state in ``checkpoint``: under its class's name, as Lightning 2.6
    saves it, or under ``"datamodule"``, where trainmesh's checkpoints before it kept it; None
    without a data module or a saved state."""
    if datamodule is None:
        return None
    return checkpoint.get(type(datamodule).__qualname__, checkpoint.get("datamodule"))
