"""What a ``train_step``/``test_step`` of the user's own returns, over all processes.

At the end of each training epoch and each evaluation, Keras hands History and the callbacks the
model's metrics (``get_metrics_result``) when the last step returned exactly their names, and the
last step's own dict otherwise. A step of the user's often returns other names: keras-io's
``{m.name: m.result() for m in self.metrics}`` names the compiled metrics ``compile_metrics``, not
their members; a step may add a tracker of its own or a plain tensor. That dict is each process's
own, so EarlyStopping and ReduceLROnPlateau would decide per process. Each entry becomes its value
over all processes, the same on every process:

- an entry equal, on every process, to the result of the model's metric of that name: the metric's
  result once its state is summed over the processes (sync.reduce_metrics), so weighed as Keras'
  metric weighs it (a Mean by its counts; Precision by its confusion counts);
- any other number or tensor: the processes' values weighted by the size of their last batch, which
  is one process's value at the global batch for a mean over the batch (a loss);
- anything else (a string; values whose shapes differ between processes): each process's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import require_keras
from trainmesh.runtime import Runtime


def own_results(model: Any) -> dict[str, Any]:
    """Each metric's result by name, as a step returning ``{m.name: m.result() ...}`` has it, and each member
    of a metric whose result is a dict (the compiled metrics) by its own name, as Keras' ``compute_metrics``
    returns them: a ``compute_metrics`` override adding an entry to Keras' own hands its step's logs on with
    ``mae`` and ``rmse``, not ``compile_metrics`` (before, not found here, they were weighted by the batch
    sizes: History 8e-3 apart from one process where Keras weighs by the sample weights, or takes a root)."""
    results = {metric.name: metric.result() for metric in model.metrics}
    for result in list(results.values()):
        if isinstance(result, dict):
            results.update({name: value for name, value in result.items() if name not in results})
    return results


def over_processes(runtime: Runtime, logs: dict[str, Any], before: dict[str, Any], after: dict[str, Any], batch: int):
    """``logs`` with each entry over all processes. ``before``/``after``: :func:`own_results` before
    and after the metric states were summed; ``batch``: this process's last batch size."""
    mine = {key: (key in before and same(value, before[key]), _numbers(value)) for key, value in logs.items()}
    gathered = runtime.all_gather_object((mine, batch))
    sizes = [size for _, size in gathered]
    result = {}
    for key, value in logs.items():
        entries = [entries[key] for entries, _ in gathered]
        if key in after and all(is_result for is_result, _ in entries):
            result[key] = after[key]
        else:
            result[key] = _weighted(value, [numbers for _, numbers in entries], sizes)
    return result


def _leaves(value: Any) -> list[Any]:
    return list(require_keras().tree.flatten(value))


def _as_array(leaf: Any) -> np.ndarray | None:
    if isinstance(leaf, torch.Tensor):
        return leaf.detach().cpu().numpy()
    if isinstance(leaf, (int, float, np.ndarray, np.generic)) and np.asarray(leaf).dtype.kind in "biuf":
        return np.asarray(leaf)
    if hasattr(leaf, "numpy") and hasattr(leaf, "dtype"):  # a Keras Variable
        return np.asarray(leaf.numpy())
    return None


def _numbers(value: Any) -> list[np.ndarray] | None:
    """The numeric leaves of ``value`` as float64 arrays (None: a leaf is not a number)."""
    arrays = [_as_array(leaf) for leaf in _leaves(value)]
    if any(array is None for array in arrays):
        return None
    return [np.asarray(array, dtype=np.float64) for array in arrays if array is not None]


def same(value: Any, result: Any) -> bool:
    """Whether ``value`` is ``result`` as computed (the same structure and bit-identical numbers)."""
    ours, theirs = _numbers(value), _numbers(result)
    return (
        ours is not None
        and theirs is not None
        and len(ours) == len(theirs)
        and all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    )


def _weighted(value: Any, numbers: list[list[np.ndarray] | None], sizes: list[int]) -> Any:
    """sum_r b_r v_r / sum_r b_r for every leaf of ``value``, in its structure and dtypes."""
    first = numbers[0]
    total = sum(sizes)
    if (
        first is None
        or total == 0
        or any(n is None or [a.shape for a in n] != [a.shape for a in first] for n in numbers)
    ):
        return value
    leaves = _leaves(value)
    averaged = []
    for index, leaf in enumerate(leaves):
        mean = sum(size * n[index] for size, n in zip(sizes, numbers, strict=True) if n is not None) / total
        dtype = _as_array(leaf).dtype  # type: ignore[union-attr]
        averaged.append(np.asarray(mean, dtype=dtype if dtype.kind == "f" else np.float64))
    return require_keras().tree.pack_sequence_as(value, averaged)
