"""One input batch for a model the command line built without a Trainer (``trainmesh estimate``,
``trainmesh project``): what the model's forward takes, found without guessing its dtype.

In order: ``--batch_shape`` (random values of the dtype the model's first layer reads: token ids
below the vocabulary for an ``nn.Embedding``, floats otherwise); one batch of the data module's
training loader; the model's ``example_input_array`` (Lightning's attribute); else none. The batch
is then checked with one forward pass on two of its rows, so a mismatch is one sentence, not a
traceback from deep inside the model.

>>> import torch
>>> batch, source = model_input(torch.nn.Embedding(10, 4), batch_shape="3,5", data=None, model_path="m:E")
>>> batch.dtype, int(batch.max()) < 10, source
(torch.int64, True, 'a random batch of shape (3, 5) (token ids below 10, for the nn.Embedding it starts with)')
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def model_input(model: nn.Module, *, batch_shape: str | None, data: Any, model_path: str) -> tuple[Any, str]:
    """(batch, where it came from); the batch is None when nothing says what the model takes.

    ``data``: a data module instance (its ``train_dataloader``'s first batch is used) or None.
    """
    batch: Any
    if batch_shape:
        batch, source = _random_batch(model, batch_shape)
    elif data is not None:
        batch, source = _first_batch(data), f"one training batch of {type(data).__name__}"
    elif getattr(model, "example_input_array", None) is not None:
        batch, source = model.example_input_array, f"{type(model).__name__}.example_input_array"
    else:
        return None, "no input (activations not counted: pass --data, --batch_shape or set example_input_array)"
    check_forward(model, batch, source=source, model_path=model_path)
    return batch, source


def _random_batch(model: nn.Module, batch_shape: str) -> tuple[torch.Tensor, str]:
    try:
        shape = tuple(int(size) for size in batch_shape.split(","))
    except ValueError:
        raise ValueError(f"--batch_shape {batch_shape!r}: give sizes separated by commas, e.g. 32,64") from None
    if not shape or any(size < 1 for size in shape):
        raise ValueError(f"--batch_shape {batch_shape!r}: every size must be at least 1")
    first = next((m for m in model.modules() if next(m.parameters(recurse=False), None) is not None), None)
    if isinstance(first, nn.Embedding):
        # Token ids, as a language model reads them: float values would crash the lookup.
        ids = torch.randint(0, first.num_embeddings, shape, generator=torch.Generator().manual_seed(0))
        return ids, (
            f"a random batch of shape {shape} (token ids below {first.num_embeddings}, for the nn.Embedding it starts with)"
        )
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)), f"a random float batch of shape {shape}"


def _first_batch(data: Any) -> Any:
    data.prepare_data()
    data.setup("fit")
    for batch in data.train_dataloader():
        return batch
    raise ValueError(f"{type(data).__name__}.train_dataloader() yielded no batch to estimate with")


def check_forward(model: nn.Module, batch: Any, *, source: str, model_path: str) -> None:
    """One forward pass on the batch's first two rows; a failure becomes a ValueError saying which
    input failed and how to give another."""
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    if not isinstance(inputs, torch.Tensor):
        raise ValueError(
            f"{source} starts with a {type(inputs).__name__}, not a tensor; the estimate runs the model's forward "
            "on the batch's first tensor: pass --batch_shape, or a data module whose batches are (inputs, ...)"
        )
    try:
        with torch.no_grad():
            model(inputs[:2])
    except (RuntimeError, IndexError, TypeError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"{model_path}'s forward failed on {source} (dtype {inputs.dtype}, shape {tuple(inputs.shape)}): "
            f"{type(error).__name__}: {first_line}. Pass --batch_shape with the shape its forward takes, "
            "--data with its data module, or set example_input_array on the model"
        ) from error
