"""The epoch's accumulated ``self.log`` values in a checkpoint, so that a mid-epoch resume reports
the epoch means an uninterrupted run reports: saved from every rank, restored to each.

A value logged with ``sync_dist`` (or reduced by max/min) is one number for the run: the ranks'
accumulators are reduced at the save and restored to rank 0, the others starting neutral, so the
next reduction gives the same total. A value logged without ``sync_dist`` stays each rank's own
(Lightning's rule: results.py), so each rank's accumulator is saved (``per_rank``) and restored to
that rank; resumed on another number of processes, rank 0 takes their sum as for a synced value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainmesh.trainer.results import StageResults

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_state import LoopState


def saved_results(loop_state: LoopState, runtime: Runtime) -> dict[str, Any]:
    """The accumulators of the epoch so far, for a checkpoint (a collective: every rank calls it)."""
    stop = loop_state.loop.stopped_inside
    if stop is not None:
        state = {name: dict(entry) for name, entry in stop.train_results.items()}  # reduced anew each save
    elif loop_state.train_results is None:
        return {}
    else:
        state = loop_state.train_results.state_dict()
    for name in sorted(state):  # the same order on every rank: these are collectives
        entry = state[name]
        if entry.get("per_rank") is None and runtime.world_size > 1 and not _synced(entry):
            entry["per_rank"] = [
                (None if total is None else total.cpu(), weight)
                for total, weight in runtime.all_gather_object((entry["total"], entry["weight"]))
            ]
        _reduce_entry(entry, runtime)
    return state


def _synced(entry: dict[str, Any]) -> bool:
    return bool(entry["options"][5])  # (prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)


def _reduce_entry(entry: dict[str, Any], runtime: Runtime) -> None:
    reduce_fx = StageResults.saved_reduce_fx(entry)
    op = reduce_fx if reduce_fx in ("max", "min") else "sum"
    if entry["total"] is not None:
        entry["total"] = runtime.all_reduce(entry["total"], op).cpu()
    weight = torch.tensor(float(entry["weight"]), dtype=torch.float64, device=runtime.device)
    entry["weight"] = float(runtime.all_reduce(weight, "sum"))


def results_for_this_rank(state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """What this rank's accumulators resume from: its own where the value is each rank's and the
    run has as many processes as the saved one, else the reduced value on rank 0, neutral elsewhere."""
    restored = {}
    for name, entry in state.items():
        per_rank = entry.get("per_rank")
        if per_rank is not None and len(per_rank) == world_size:
            total, weight = per_rank[rank]
            restored[name] = {**entry, "total": total, "weight": weight}
        elif rank == 0:
            restored[name] = entry
        else:
            op = StageResults.saved_reduce_fx(entry)
            fill = float("-inf") if op == "max" else float("inf") if op == "min" else 0.0
            total = None if entry["total"] is None else torch.full_like(entry["total"], fill)
            restored[name] = {**entry, "total": total, "weight": 0.0}
    return restored
