"""The searches of Lightning's ``LearningRateFinder`` and ``BatchSizeFinder`` callbacks (and of the
``Tuner``, which runs a fit with one of them), inside the fit as Lightning runs them: after
``configure_optimizers``, just before the callbacks' ``on_fit_start`` (Lightning puts the finders first
and searches at theirs), their trials run by ``search_trials.py``. A Tuner's fit ends after its
search (``TunerExit``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.seed import isolate_rng
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.search_trials import SearchTrials, TrainLoop, TunerExit
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lazy import is_instance
from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime

_FINDERS = "trainmesh.callbacks.finders"


def finder_callbacks(callbacks: list[Any]) -> list[Any]:
    """The finder callbacks among ``callbacks``, in their order (a run with none never imports them)."""
    return [cb for cb in callbacks if is_instance(cb, _FINDERS, "LearningRateFinder", "BatchSizeFinder")]


def refuse_several_processes(trainer: TrainerView, runtime: Runtime) -> None:
    """Before the launch: a ``BatchSizeFinder`` with the devices asked for (the processes are not started
    yet), or a launched world, as Lightning refuses it. Its ``LearningRateFinder`` runs on each rank, the
    ranks stopping together and taking rank 0's results (``in_fit_searches.lr_find``)."""
    finders = [cb for cb in finder_callbacks(trainer.callbacks) if is_instance(cb, _FINDERS, "BatchSizeFinder")]
    if finders and (trainer.world_size > 1 or len(runtime.device_indices) * runtime.num_nodes > 1):
        from trainmesh.utilities.exceptions import MisconfiguredValue

        raise MisconfiguredValue(  # Lightning's refusal too: its exception and words
            "The Batch size finder is not supported with distributed strategies. Find the batch size with "
            "one process (devices=1), then pass it to the distributed run"
        )


def run_searches(ctx: LoopContext, fit_data: FitData, train: TrainLoop) -> None:
    """Each finder's search, in the callbacks' order, its result handed to the callback; the train
    loader each search ends with, and its iterator started then, are the fit's (Lightning's fit reads them)."""
    finders = finder_callbacks(ctx.view.callbacks)
    if not finders:
        return
    from trainmesh.callbacks.finders import BatchSizeFinder, refuse_later_searches

    refuse_later_searches(finders)
    if ctx.settings.fast_dev_run:  # Lightning's words, each finder's
        for finder in finders:
            what = "batch size scaler" if is_instance(finder, _FINDERS, "BatchSizeFinder") else "learning rate finder"
            rank_zero_warn(f"Skipping {what} since `fast_dev_run` is enabled.")
            finder.searched(None)
        return
    from trainmesh.tuner import in_fit_searches  # a run with no finder never imports the tuner

    for finder in finders:
        early_exit = getattr(finder, "_early_exit", False)  # the Tuner's (Lightning's flag)
        # a 1.x run's finder searches as 1.9.5's, whose finders carry their search (trainer/lightning1/tuner.py)
        searcher = ctx.view._lightning1_finder(finder) if ctx.view._written_for_lightning1 else finder
        arguments = searcher.search_arguments(ctx.state.module) | {"fit_follows": not early_exit}
        result: Any
        search = getattr(searcher, "in_fit_search", None)
        if isinstance(finder, BatchSizeFinder):
            # Lightning's batch size search runs with the run's random state (no isolate_rng).
            search = search or in_fit_searches.scale_batch_size
            result = search(SearchTrials(ctx, fit_data, train), **arguments)
        else:
            # as Lightning's LearningRateFinder.lr_find (the fit's first iterator is made inside too)
            with isolate_rng():
                search = search or in_fit_searches.lr_find
                result = search(SearchTrials(ctx, fit_data, train), **arguments)
        finder.searched(result)
        if early_exit:
            raise TunerExit


def after_searches(ctx: LoopContext, checkpoint: dict[str, Any] | None, source: str) -> dict[str, Any] | None:
    """The checkpoint whose training state the fit restores after ``on_fit_start``, as Lightning 2.6.6 does
    once an in-fit finder searched: the search's restore of its temporary checkpoint took the place of
    the fit's (its checkpoint connector's ``_ckpt_path``, the loaded checkpoint cleared), so a fit resumed
    from a ``ckpt_path`` the program named keeps the weights and callback states restored before
    ``on_fit_start`` but starts its loops, optimizers and schedulers afresh, and names the search's file in
    ``trainer.ckpt_path`` and in one more "Restored all states" line (a fit without ``ckpt_path`` too).
    ``Trainer(exact_resume=True)``: the named checkpoint's training state is restored after the search."""
    from trainmesh.trainer.resume import say_restored

    state = ctx.state
    searched = state.ckpt_path if state.ckpt_path and state.ckpt_path != (source or None) else None
    if searched is None:
        return checkpoint
    if checkpoint is None or (state.named_resume and ctx.modules_restored):
        say_restored(searched, fitting=True)
        return None
    state.ckpt_path = source  # restored below, the search's file forgotten
    return checkpoint
