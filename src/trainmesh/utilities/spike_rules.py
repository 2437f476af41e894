"""The rules Lightning's two spike detectors share (the Trainer's callback and Fabric's utility):
when a loss counts as a spike, and what a spike leaves behind. Each detector keeps its own running
mean and its own way of agreeing across processes; these functions are the part they have in common."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from trainmesh.utilities.exceptions import TrainingSpikeException


def is_better(diff_val: torch.Tensor, mode: str) -> bool:
    """Whether the loss moved the good way since the last one (no spike then), Lightning's words on a bad mode."""
    if mode == "min":
        return bool((diff_val <= 0.0).all())
    if mode == "max":
        return bool((diff_val >= 0).all())
    raise ValueError(f"Invalid mode. Has to be min or max, found {mode}")


def beyond_tolerances(loss: Any, running: Any, atol: float | None, rtol: float | None) -> bool:
    """Whether ``loss`` is at least ``atol`` and ``rtol * running`` away from the running mean (a tolerance
    of None always holds)."""
    beyond_atol = atol is None or bool(abs(loss - running) >= abs(atol))
    return beyond_atol and (rtol is None or bool(abs(loss - running) >= abs(rtol * running)))


def record_spike(bad_batches: list[int], path: Any, batch_idx: int, is_rank_zero: bool) -> None:
    """Add the spiking batch and the one before it (which may have corrupted the weights the spike shows)
    to ``bad_batches``, written as JSON by rank 0, and raise Lightning's ``TrainingSpikeException``."""
    bad_batches.extend([batch_idx - 1, batch_idx])
    if is_rank_zero:
        os.makedirs(os.path.dirname(str(path)), exist_ok=True)
        with open(str(path), "w") as f:
            json.dump(bad_batches, f, indent=4)
    raise TrainingSpikeException(batch_idx=batch_idx)
