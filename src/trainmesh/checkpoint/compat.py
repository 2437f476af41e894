"""Explain, by name, why a saved state dict does not fit a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_state_dict_fits(
    expected: Mapping[str, Any], loaded: Mapping[str, Any], *, source: str, strict: bool = True
) -> None:
    """Raise ValueError naming missing, unexpected and reshaped entries; return when they fit.
    ``strict=False`` (a module's ``strict_loading = False``): only reshaped entries, as torch's
    ``load_state_dict(strict=False)`` refuses only those."""
    missing = [k for k in expected if k not in loaded] if strict else []
    unexpected = [k for k in loaded if k not in expected] if strict else []
    reshaped = [
        f"{k}: checkpoint {tuple(loaded[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in expected
        if k in loaded
        and hasattr(expected[k], "shape")
        and hasattr(loaded[k], "shape")
        and tuple(expected[k].shape) != tuple(loaded[k].shape)
    ]
    if not (missing or unexpected or reshaped):
        return
    parts = []
    if missing:
        parts.append(f"missing from the checkpoint: {_clip(missing)}")
    if unexpected:
        parts.append(f"in the checkpoint but not the model: {_clip(unexpected)}")
    if reshaped:
        parts.append(f"different shapes: {_clip(reshaped)}")
    raise ValueError(
        f"the checkpoint {source} does not match this model ({'; '.join(parts)}). "
        "Was it saved from another model or other hyperparameters? Build the model with the same "
        "settings, or load the weights yourself with load_state_dict(strict=False)."
    )


def _clip(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
