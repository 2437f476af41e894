"""Keras' random functions drawing nothing, for the step probe's second try (step_probe.py).

The probe replays the whole batch's draws in its halves by rows. A step that cuts its batch itself (updates on
halves of its batch, micro-batches) draws on other rows than the whole batch's in each half: a half of 8 samples
draws on rows of 4 where the whole batch drew on rows of 8, and no row of one is a row of the other. Before, such a
step was not probed and ran; k-custom2's half_steps (2 updates per batch, 1.36 of the gradients' norm apart from
one process) through a Dropout layer trained under 2 processes apart from Keras' fit at the global batch, silently.

So where the draws do not line up, the probe runs the step again with each of Keras' draws standing at its
expected value (Dropout keeps every input, ``normal`` gives its mean, ``shuffle`` keeps the order): the same numbers
on any rows, so the whole batch and its halves compare as a step without draws does. Whether the loss is a mean
over the samples does not depend on what the draws drew (a mean of per-sample losses stays one at any draw). The
module functions are routed for the probe's runs only (restored after); nothing of the program's is touched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch


def _expected(name: str, arguments: dict[str, Any]) -> Any:
    """The value each entry of the draw stands at (a number or a tensor broadcast to the draw's shape)."""
    if name in ("normal", "truncated_normal"):
        return arguments["mean"]
    if name == "uniform":
        return (arguments["minval"] + arguments["maxval"]) / 2
    if name == "randint":
        return arguments["minval"]
    if name == "gamma":
        return arguments["alpha"]
    if name == "binomial":
        return torch.as_tensor(arguments["counts"]) * torch.as_tensor(arguments["probabilities"])
    assert name == "beta", name
    return torch.as_tensor(arguments["alpha"]) / (torch.as_tensor(arguments["alpha"]) + arguments["beta"])


def expected_draw(keras_draw: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What Keras' ``name`` (``keras_draw``) returns standing at its expected value, drawing nothing."""
    from keras.src.backend import floatx, standardize_dtype
    from keras.src.backend.torch.core import convert_to_tensor, get_device, to_torch_dtype

    bound = inspect.signature(keras_draw).bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = bound.arguments
    if name == "dropout":  # every input kept, unscaled: the mask's expected value times 1 / keep
        return convert_to_tensor(arguments["inputs"])
    if name == "shuffle":
        return convert_to_tensor(arguments["x"])
    if name == "categorical":  # the likeliest class, each time
        logits = convert_to_tensor(arguments["logits"])
        likeliest = torch.argmax(logits, dim=-1, keepdim=True).expand(-1, int(arguments["num_samples"]))
        return likeliest.to(to_torch_dtype(standardize_dtype(arguments["dtype"])))
    dtype = to_torch_dtype(standardize_dtype(arguments["dtype"] or floatx()))
    shape = tuple(int(size) for size in arguments["shape"])
    value = torch.as_tensor(_expected(name, arguments), device=get_device())
    return (torch.zeros(shape, device=get_device()) + value).to(dtype)
