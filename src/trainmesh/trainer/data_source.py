"""Where a stage's dataloaders come from: arguments, a DataModule, or the Module itself."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import DataLoader

from trainmesh.data_hooks import DataHooks
from trainmesh.trainer.combined_loaders import evaluation_loaders
from trainmesh.trainer.hooks import warn_legacy_datamodule_hooks
from trainmesh.trainer.states import hook_stage
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.lazy import is_instance

# The DataModule's module, imported by a program that uses one (or asks for tm.DataModule): a run
# without one does not import it (nor 1.x's argparse helpers it carries).
_DATAMODULE = "trainmesh.datamodule"


def _base_method(method: str) -> Any:
    """The loader method of Lightning's base classes (DataHooks'), which raises: a Module or DataModule
    whose ``method`` is it defines no loaders of that kind."""
    return vars(DataHooks)[method]


def _is_base(found: Any, method: str) -> bool:
    return getattr(found, "__func__", None) is _base_method(method)


_LOADER_METHOD = {
    "train": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}


@dataclass
class DataSource:
    datamodule: Any = None
    model: Any = None
    given: dict[str, Any] = field(default_factory=dict)
    train_mode: str = "max_size_cycle"  # several train loaders read as one (1.x's multiple_trainloader_mode)
    validate_first: bool = False  # a 1.x trainer.tune search: validate before the first batch (lightning1/)
    # What each kind's loaders were last given as (a loader, a list, a dict, a CombinedLoader):
    # Lightning's trainer.train_dataloader / val_dataloaders / ... hand the loaders back so.
    shapes: dict[str, Any] = field(default_factory=dict)
    trainer_fn: str = ""  # the entry point reading them ("fit", "validate", ...): Lightning's error names it

    @classmethod
    def for_fit(cls, model: Any, train: Any, val: Any, datamodule: Any) -> DataSource:
        train, datamodule = _datamodule_in_loader_place(train, datamodule, "train_dataloaders")
        if (train is not None or val is not None) and datamodule is not None:
            # Lightning's words (the DataModule's loaders would be ignored, or the arguments)
            raise MisconfiguredValue(
                "You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.fit(datamodule=...)`"
            )
        given = {k: v for k, v in (("train", train), ("validate", val)) if v is not None}
        return cls(datamodule=datamodule, model=model, given=given, trainer_fn="fit")

    @classmethod
    def for_stage(cls, stage: str, model: Any, loaders: Any, datamodule: Any) -> DataSource:
        loaders, datamodule = _datamodule_in_loader_place(loaders, datamodule, "dataloaders")
        if loaders is not None and datamodule is not None:
            name = {"validate": "validate", "test": "test", "predict": "predict"}[stage]
            raise MisconfiguredValue(f"You cannot pass both `trainer.{name}(dataloaders=..., datamodule=...)`")
        given = {stage: loaders} if loaders is not None else {}
        return cls(datamodule=datamodule, model=model, given=given, trainer_fn=stage)

    def prepare(self, trainer: TrainerView, stage: str) -> None:
        """prepare_data, the DataModule's then the Module's (Lightning's order), each where its
        ``prepare_data_per_node`` says, every process waiting for it; then the DataModule's
        setup(stage) in every process."""
        if self.datamodule is not None:
            warn_legacy_datamodule_hooks(self.datamodule)
            self.datamodule.trainer = trainer
        for owner in (self.datamodule, self.model):
            if owner is not None and _defines_prepare_data(owner):
                # Once per machine (local rank 0), or with prepare_data_per_node=False once in all.
                per_node = getattr(owner, "prepare_data_per_node", True)
                if trainer.local_rank == 0 and (per_node or trainer.global_rank == 0):
                    owner.prepare_data()
                trainer.runtime.barrier("prepare_data")
        if self.datamodule is not None:
            self.datamodule.setup(stage=hook_stage(stage))  # by keyword, as Lightning calls it

    def teardown(self, stage: str) -> None:
        if self.datamodule is not None:
            self.datamodule.teardown(stage=hook_stage(stage))

    def defines(self, kind: str) -> bool:
        """Whether there are ``kind`` loaders to ask for, told without asking (Lightning's
        ``is_defined``): passed as an argument, or a loader method of the DataModule's or the
        Module's own (not the DataModule base's, which raises)."""
        method = _LOADER_METHOD[kind]
        if kind in self.given:
            return True
        owner = self._owner()
        found = getattr(owner, method, None)
        return owner is not None and callable(found) and not _is_base(found, method)

    def _owner(self) -> Any:
        """Where loaders not given as arguments come from: the DataModule where one is given (only it,
        as Lightning's ``attach_datamodule`` points every loop's source at it: the Module's own
        loader methods are not asked then), else the Module."""
        return self.datamodule if self.datamodule is not None else self.model

    def _check_iterable(self, loaders: Any, kind: str, *, returned_by: str | None, missing: str | None = None) -> None:
        """Lightning's ``_check_dataloader_iterable``: a loader that cannot be iterated stops with its
        ``TypeError`` naming where it came from (not a bare "'int' object is not iterable" later).
        None is such a loader (a method returning None, a None in a list or dict of loaders): Lightning
        2.6 refuses it where 1.9.5 left an evaluation loader out (and trained on a None train loader
        nothing). ``missing``: the loader method the owner has set to None (nothing was passed)."""
        for loader in _leaves(loaders):
            if isinstance(loader, DataLoader):
                continue  # always iterable; iter() would start its workers
            try:
                iter(loader)
            except TypeError:
                if returned_by is not None:
                    raise TypeError(
                        f"An invalid dataloader was returned from `{returned_by}`. Found {loader}."
                    ) from None
                entry = self.trainer_fn or ("fit" if kind == "train" else kind)
                prefix = "train_" if entry == "fit" else ""
                hint = (
                    f" Either pass the dataloader to the `.{entry}()` method OR implement `def {missing}(self):` in"
                    " your LightningModule/LightningDataModule."
                    if missing
                    else ""
                )
                raise TypeError(
                    f"An invalid dataloader was passed to `Trainer.{entry}({prefix}dataloaders=...)`. Found {loader}."
                    + hint
                ) from None

    def loaders(self, kind: str, *, required: bool) -> list[Any]:
        """The loaders for ``kind`` ("train", "validate", "test", "predict"), as a list."""
        if kind in self.given:
            self.shapes[kind] = self.given[kind]
            self._check_iterable(self.given[kind], kind, returned_by=None)
            return _in_list(kind, self.given[kind])
        method = _LOADER_METHOD[kind]
        owner = self._owner()
        impl = getattr(owner, method, None)
        if impl is not None and _is_base(impl, method):
            if required:  # the base's method, which Lightning calls and which raises this
                raise MisconfiguredValue(f"`{method}` must be implemented to be used with the Lightning Trainer")
            return []
        if impl is not None:
            # What the method raises (NotImplementedError included) reaches the program, as
            # Lightning 2.6 and 1.9.5 let it
            self.shapes[kind] = impl()
            self._check_iterable(self.shapes[kind], kind, returned_by=f"{type(owner).__name__}.{method}()")
            return _in_list(kind, self.shapes[kind])
        if required and owner is not None and hasattr(owner, method):
            # The method set to None (Lightning's tests' way of removing it): Lightning's TypeError
            self._check_iterable(None, kind, returned_by=None, missing=method)
        if required:  # Lightning's words: its base classes' loader methods raise them
            raise MisconfiguredValue(f"`{method}` must be implemented to be used with the Lightning Trainer")
        return []


def _leaves(loaders: Any) -> Iterator[Any]:
    """Each loader of a loader, a list/tuple/dict of them or a CombinedLoader (its ``flattened``),
    split as Lightning's ``CombinedLoader`` splits them: a container of numbers or strings (``[0, 1]``,
    ``[]``) is one iterable, not several loaders. None included: Lightning keeps it as a loader (and
    refuses it)."""
    if is_instance(loaders, "trainmesh.utilities.combined_loader", "CombinedLoader"):
        yield from loaders.flattened
    elif not isinstance(loaders, (list, tuple, dict, collections.deque)):
        yield loaders  # one loader: a leaf (a plain fit does not import the flattening)
    else:
        from trainmesh.utilities.combined_loader import _tree_flatten

        yield from _tree_flatten(loaders)[0]


def _defines_prepare_data(owner: Any) -> bool:
    """Whether ``owner`` has a prepare_data of its own (Lightning calls only an overridden one)."""
    from trainmesh.data_hooks import DataHooks

    found = getattr(type(owner), "prepare_data", None)
    return found is not DataHooks.prepare_data if isinstance(owner, DataHooks) else callable(found)


def is_datamodule(obj: Any) -> bool:
    """A trainmesh DataModule, or any object that has loader methods and is not itself a
    loader (a Lightning-style data module ported with its class name only)."""
    if is_instance(obj, _DATAMODULE, "DataModule"):
        return True
    if hasattr(obj, "__iter__") or hasattr(obj, "__len__"):
        return False
    found = [getattr(obj, method, None) for method in _LOADER_METHOD.values()]
    return any(callable(f) and not _is_base(f, m) for f, m in zip(found, _LOADER_METHOD.values(), strict=True))


def _datamodule_in_loader_place(loaders: Any, datamodule: Any, name: str) -> tuple[Any, Any]:
    """``trainer.fit(model, dm)``: a data module passed where the loaders go is taken as ``datamodule``."""
    if loaders is None or not is_datamodule(loaders):
        return loaders, datamodule
    if datamodule is not None:
        raise ValueError(
            f"{name} is a data module ({type(loaders).__name__}) and datamodule= is given too: trainmesh would "
            f"not know which to use. Pass one data module, as datamodule=..."
        )
    return None, loaders


def _in_list(kind: str, loaders: Any) -> list[Any]:
    """An evaluation's loaders one by one (a dict's, a sequential CombinedLoader's): training's
    are combined instead (fit_data.py)."""
    found = _as_list(loaders)
    return found if kind == "train" else evaluation_loaders(found, kind)


def _as_list(loaders: Any) -> list[Any]:
    if loaders is None:
        return []
    if isinstance(loaders, (list, tuple)):
        from trainmesh.utilities.combined_loader import is_one_iterable  # only for a list or tuple given

        if not is_one_iterable(loaders):
            return list(loaders)
    return [loaders]
