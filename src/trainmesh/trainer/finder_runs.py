"""The searches of Lightning's ``LearningRateFinder`` and ``BatchSizeFinder`` callbacks, run by
``Trainer.fit`` just before its run (``callbacks/finders.py`` says why not nested, as Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.seed import isolate_rng
from trainmesh.utilities.lazy import is_instance

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.tuner.tuning import Trainer

_FINDERS = "trainmesh.callbacks.finders"


def run_searches(
    trainer: Trainer, runtime: Runtime, model: Any, train_dataloaders: Any, val_dataloaders: Any, datamodule: Any
) -> Any:
    """Each finder's search, in the callbacks' order (Lightning's order at ``on_fit_start``), its result
    handed to the callback. The Tuner's searches leave the weights and the Trainer's fit state as before.
    Returns the train loader a batch size search ended with, for the fit to read as Lightning's reads it
    (None: the fit asks for its own)."""
    # A run with no finder callback never imports their module.
    finders = [cb for cb in trainer.callbacks if is_instance(cb, _FINDERS, "LearningRateFinder", "BatchSizeFinder")]
    if not finders:
        return None
    from trainmesh.callbacks.finders import BatchSizeFinder

    # Before the launch: the devices asked for (the processes are not started yet), or a launched world.
    if trainer.world_size > 1 or len(runtime.device_indices) * runtime.num_nodes > 1:
        raise ValueError(
            f"{type(finders[0]).__name__} runs on one process only in trainmesh (its search is a short fit of "
            "this Trainer's): find the value with one process (devices=1), then pass it to the distributed run"
        )
    from trainmesh.tuner.tuning import Tuner  # a run with no finder never imports the tuner

    tuner = Tuner(trainer)
    tuner._fit_follows = True
    data = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders, "datamodule": datamodule}
    for finder in finders:
        arguments = finder.search_arguments(model)
        if isinstance(finder, BatchSizeFinder):
            # Lightning's batch size search runs with the run's random state (no isolate_rng).
            finder.searched(tuner.scale_batch_size(model, **data, **arguments))
        else:
            with isolate_rng():  # as Lightning's LearningRateFinder.lr_find
                finder.searched(tuner.lr_find(model, **data, **arguments))
    return tuner.fit_train_loader
