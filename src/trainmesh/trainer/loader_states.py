"""The state of stateful train loaders across a checkpoint, as Lightning 2.6 keeps it.

Lightning's fit loop saves ``state_dict()`` of each train loader that has ``state_dict`` and
``load_state_dict`` (its ``_Stateful``: a torchdata ``StatefulDataLoader``, a program's own
iterable) in its ``loops`` entry (``fit_loop.state_dict.combined_loader``), and a restarting
fit loads them back before its loader's iterator starts (``_FitLoop._load_combined_loader_states``):
a resume inside an epoch then reads the rest of that epoch from the loader itself. trainmesh writes
them the same way, so Lightning's resume of trainmesh's checkpoint reads as its own; trainmesh's own
resume replays its epoch from its saved generators instead and does not load them (epoch_opening.open_epoch).
"""

from __future__ import annotations

from typing import Any


def _is_stateful(loader: Any) -> bool:
    return hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict")


def stateful_loaders(loader: Any) -> list[Any]:
    """The program's loaders inside fit's train loader (a placed loader, a ``CombinedLoader``'s
    iterables) that keep a state, in Lightning's order (``CombinedLoader.flattened``)."""
    inner = getattr(loader, "loader", loader)  # the device placement's wrapper
    combined = getattr(inner, "combined", inner)  # trainmesh's CombinedBatches
    flattened = getattr(combined, "flattened", None)
    loaders = flattened if isinstance(flattened, list) else [inner]
    return [each for each in loaders if _is_stateful(each)]


def all_stateful(loader: Any) -> bool:
    """Lightning's ``is_resumable_loader``: every loader of fit's train loader keeps a state."""
    inner = getattr(loader, "loader", loader)
    combined = getattr(inner, "combined", inner)
    flattened = getattr(combined, "flattened", None)
    return all(_is_stateful(each) for each in (flattened if isinstance(flattened, list) else [inner]))


def train_loader_states(loader: Any) -> list[dict[str, Any]]:
    """What Lightning's ``loops`` entry holds as ``combined_loader`` (empty: no such entry)."""
    return [each.state_dict() for each in stateful_loaders(loader)] if loader is not None else []


def states_to_load(checkpoint: dict[str, Any], *, iteration_based: bool) -> list[dict[str, Any]]:
    """The loader states a fit resumed from Lightning's ``checkpoint`` loads: where its fit loop restarts
    (the saved epoch unfinished, or the fit bounded by ``max_steps``: Lightning's ``restarting`` setter)."""
    fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
    saved = fit_loop.get("state_dict", {}).get("combined_loader") or []
    current = fit_loop.get("epoch_progress", {}).get("current", {})
    unfinished = any(current.get(key, 0) != current.get("processed", 0) for key in ("ready", "started"))
    return list(saved) if unfinished or iteration_based else []


def load_loader_states(loader: Any, states: list[dict[str, Any]]) -> None:
    """Lightning's ``CombinedLoader._load_state_dicts``: each stateful loader its saved state, in order."""
    if not states:
        return
    loaders = stateful_loaders(loader)
    if len(loaders) != len(states):
        raise RuntimeError(
            f"The CombinedLoader has {len(loaders)} stateful loaders, but found {len(states)} states"
            " in the checkpoint. Please make sure you define the same dataloaders that were used when saving"
            " the checkpoint."
        )
    for each, state in zip(loaders, states):
        each.load_state_dict(state)
