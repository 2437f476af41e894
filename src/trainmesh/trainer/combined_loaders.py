"""Where a stage's loaders are a ``CombinedLoader``, or a collection Lightning reads as one
(its ``_FitLoop.setup_data`` and ``_EvaluationLoop.setup_data``).

Training reads one loader: several train loaders (a list, a dict) are
``CombinedLoader(loaders, "max_size_cycle")``, and a ``CombinedLoader`` is read in its mode
(``sequential`` is refused where Lightning's epoch loop refuses it: ``refuse_sequential_training``). Evaluation reads a list of loaders: a
``sequential`` ``CombinedLoader`` (what Lightning makes of a dict of loaders) gives its iterables,
each with its ``dataloader_idx``; another mode is one loader of combined batches.
"""

from __future__ import annotations

import copy
from typing import Any

from trainmesh.trainer.loop_context import LoopContext
from trainmesh.utilities.lazy import is_instance

_MODULE = "trainmesh.utilities.combined_loader"  # imported by a run that combines loaders


def train_loader(loaders: list[Any], mode: str = "max_size_cycle", *, given_as: Any = None) -> Any:
    """The one loader fit reads, of the train loaders given (a dict as one item), several read in
    ``mode`` (Lightning 1.x's ``multiple_trainloader_mode``); given as a list or tuple
    (``given_as``), even of one loader, each batch is a list or tuple of the loaders' batches, as
    Lightning's (a list of numbers is one loader, not a list of them)."""
    as_list = False
    if isinstance(given_as, (list, tuple)):  # only then: a plain fit does not import the module
        from trainmesh.utilities.combined_loader import is_one_iterable

        as_list = not is_one_iterable(given_as)
    if len(loaders) == 1 and not isinstance(loaders[0], dict) and not as_list:
        loader = loaders[0]
    else:
        from trainmesh.utilities.combined_loader import CombinedLoader

        several = tuple(loaders) if isinstance(given_as, tuple) else loaders
        one_dict = len(loaders) == 1 and isinstance(loaders[0], dict)
        loader = CombinedLoader(loaders[0] if one_dict else several, mode)  # type: ignore[arg-type]
    return loader


def refuse_sequential_training(loader: Any) -> None:
    """Lightning's ``_FitLoop.advance``: a ``sequential`` ``CombinedLoader`` is read no batch of, refused
    once the epoch has started (after the sanity check, ``on_train_start`` and ``on_train_epoch_start``,
    its batches counted: ``trainer.num_training_batches`` the sum of its loaders'), in Lightning's words."""
    combined = getattr(getattr(loader, "loader", loader), "combined", None)  # a placed CombinedBatches'
    if combined is not None and combined.mode == "sequential":
        modes = ["min_size", "max_size_cycle", "max_size"]
        raise ValueError(
            f'`_FitLoop` does not support the `CombinedLoader(mode="sequential")` mode. The available modes are: {modes}'
        )


def evaluation_loaders(loaders: list[Any], kind: str = "val") -> list[Any]:
    """The stage's loaders one by one: a sequential ``CombinedLoader`` or a dict taken apart.
    ``kind`` "predict": another mode is refused, as Lightning's prediction loop refuses it."""
    found: list[Any] = []
    for loader in loaders:
        if isinstance(loader, dict):
            from trainmesh.utilities.combined_loader import CombinedLoader

            loader = CombinedLoader(loader, "sequential")
        if is_instance(loader, _MODULE, "CombinedLoader") and loader.mode == "sequential":
            found.extend(loader.flattened)
        elif kind == "predict" and is_instance(loader, _MODULE, "CombinedLoader"):
            raise ValueError('`trainer.predict()` only supports the `CombinedLoader(mode="sequential")` mode.')
        else:
            found.append(loader)
    return found


def inner_loaders(loader: Any) -> list[Any] | None:
    """The loaders a (placed) loader of combined batches reads, or None for any other loader:
    Lightning counts an evaluation's batches per inner loader (``trainer.num_val_batches`` is
    ``[2, 3]`` for a ``CombinedLoader`` of 2 and 3 batches, whatever its mode)."""
    from trainmesh.utilities.combined_loader import CombinedBatches

    inner = getattr(loader, "loader", loader)  # a DeviceLoader's
    if isinstance(inner, CombinedBatches):
        return list(inner.combined.flattened)
    return None


def combined_batches(ctx: LoopContext, loader: Any, *, train: bool) -> Any:
    """``loader``, or for a ``CombinedLoader`` a copy whose loaders the Runtime set up (the
    strategy's sampler, the workers' seeding; not the move to the device, which the combined
    batch gets whole), read as the loops read a loader. Under ddp each inner loader is sharded
    by a sampler of its own, as Lightning's ``_prepare_dataloader`` shards each loader of its
    ``CombinedLoader`` (tests/trainer/test_lightning_sampler_ddp.py, case ``combined``)."""
    if not is_instance(loader, _MODULE, "CombinedLoader"):
        return loader
    from trainmesh.utilities.combined_loader import CombinedBatches

    placed = ctx.runtime.setup_dataloaders(
        *loader.flattened,
        train=train,
        shuffle=ctx.shuffle_training if train else None,
        wrap_samplers=ctx.wrap_samplers,
    )
    placed = placed if isinstance(placed, list) else [placed]
    combined = copy.copy(loader)  # the user's keeps its own loaders
    combined.flattened = [device_loader.loader for device_loader in placed]
    return CombinedBatches(combined)


def as_given(shape: Any, placed: list[Any]) -> Any:
    """``placed`` (the loaders a stage reads, a ``CombinedLoader``'s taken apart) in ``shape``, the
    structure the program gave them in: Lightning's ``trainer.train_dataloader``, ``val_dataloaders``,
    ... are its ``CombinedLoader.iterables`` (a list stays a list, even of one; a dict a dict; a
    ``CombinedLoader`` gives its iterables), each loader the one the run reads."""
    flat: list[Any] = []
    for loader in placed:
        flat.extend(loader.combined.flattened if is_instance(loader, _MODULE, "CombinedBatches") else [loader])
    if not flat:
        return placed
    if is_instance(shape, _MODULE, "CombinedLoader"):
        shape = shape.iterables
    from trainmesh.utilities.combined_loader import CombinedLoader

    combined = CombinedLoader(shape)  # its iterables' structure, flattened as a CombinedLoader's
    if len(combined.flattened) != len(flat):  # not what this stage was given: the loaders as a list
        return flat[0] if len(flat) == 1 else flat
    combined.flattened = flat
    return combined.iterables
