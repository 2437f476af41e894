"""``fit_loop.epoch_progress`` as a fit (or a search's trial inside it) starts."""

from __future__ import annotations

from trainmesh.trainer.loop_state import LoopState


def restart_epoch_counts(
    state: LoopState, *, resumed: bool, processed_again: bool = False, iteration_based: bool = False
) -> None:
    """``fit_loop.epoch_progress`` as a fit starts (Lightning's on_run_start). Resumed from a save made
    as an epoch ended, Lightning's restored counts hold that epoch as processed but not completed (until
    the fit goes on to the next: ``epoch_opening.first_epoch``). ``processed_again``: that epoch's end runs again (a
    restart under max_steps, restart.py), Lightning's counts hold it processed already, and count it again."""
    epochs = state.progress.epochs
    if resumed and state.loop.epoch_finished:
        epochs.restart(state.current_epoch + 1, state.current_epoch + 1)
        epochs.total.completed = state.current_epoch
        if iteration_based:  # Lightning's on_run_start catches current up only for epoch-based training
            epochs.current.completed = state.current_epoch
    else:
        epochs.restart(state.current_epoch, state.current_epoch)
        if resumed and state.loop.batches_done > 0 and not state.loop.epoch_not_started:  # saved inside an epoch
            epochs.ready()
            epochs.started()
        if processed_again:
            epochs.processed()
