"""torch's own random functions, taped in the step probe (step_probe.py) as Keras' are.

A ``train_step`` of the program's own may draw from torch's global generator directly
(``torch.randn_like(y)`` to noise its targets). The probe compares the step's gradients on a batch with
the mean of its gradients on each half; run by run, such a draw gave other numbers (a half draws its own,
of another size), so the halves differed by the draw and a loss reduced by a sum (whose halves give half
the gradient) was taken for noise and not refused (keras_random_programs' torch-noised ``sum`` step: 2
processes trained apart from one process's fit, silently). Within the probe, each of these functions
called outside a Keras draw (Keras' own call torch's), on torch's global generator or a ``generator=`` of
the program's own (put back as it was after the probe: step_probe._Tape.saw_generator), is recorded in
the run on the whole batch and replayed in the halves, each taking its rows of a batch-shaped draw, as
Keras' draws are: the runs draw alike. A tensor's draw methods (``x.normal_()``) are taped alike
(tensor_draws.py); a draw none of these see (``from torch import randn``) still moves torch's generator
in the halves: refused where it follows the batch (unmapped_draws.py), else weighed against what those
draws alone move (step_probe.NOISE_FACTOR).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

# How each function gives its first dimension: "sizes" (ints, a tuple or size=), "size" (randint: its size
# tuple), "tensor" (shaped like its first argument), "normal" (a tensor mean/std, or size=).
TORCH_DRAWS = {
    "randn": "sizes",
    "rand": "sizes",
    "randint": "size",
    "randn_like": "tensor",
    "rand_like": "tensor",
    "randint_like": "tensor",
    "bernoulli": "tensor",
    "poisson": "tensor",
    "normal": "normal",
}
_SHAPES = (tuple, list, torch.Size)


def leading(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The first dimension of what a torch draw returns (None: not known, or a scalar)."""
    if kind in ("tensor", "dropout") or (kind == "normal" and args and isinstance(args[0], torch.Tensor)):
        first = args[0] if args else kwargs.get("input", kwargs.get("mean"))
        shape = tuple(getattr(first, "shape", ()))
    elif kind == "normal":
        shape = tuple(kwargs.get("size") or (args[2] if len(args) > 2 else ()))  # noqa: PLR2004 -- normal(m, s, size)
    elif kind == "size":
        shape = tuple(kwargs.get("size") or next((a for a in args if isinstance(a, _SHAPES)), ()))
    else:
        sizes = args[0] if args and isinstance(args[0], _SHAPES) else args
        shape = tuple(sizes or kwargs.get("size") or ())
    return int(shape[0]) if shape else None


def _taped(torch_draw: Callable[..., Any], tape: Any, name: str, kind: str) -> Callable[..., Any]:
    @functools.wraps(torch_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        if tape.inside:  # Keras' own calls
            return torch_draw(*args, **kwargs)
        if kind == "dropout":
            inputs = args[0] if args else kwargs["input"]
            rest = dict(zip(("p", "training", "inplace"), args[1:], strict=False)) | {
                k: v for k, v in kwargs.items() if k != "input"
            }
            if not rest.get("training", True) or not rest.get("p", 0.5):
                return torch_draw(*args, **kwargs)
            rest["inplace"] = False
        name_taped = f"torch.{name}"
        if tape.replaying is not None:
            out = tape.rows_of(name_taped, tape.next(0, name_taped), leading(kind, args, kwargs))
        else:
            tape.saw_generator(kwargs.get("generator"))  # a torch.Generator of the program's own: put back after
            out = torch_draw(torch.ones_like(inputs), **rest) if kind == "dropout" else torch_draw(*args, **kwargs)
            tape.draws.append((name_taped, out))
        return inputs * out if kind == "dropout" else out

    return draw


@contextlib.contextmanager
def taped(tape: Any) -> Iterator[None]:
    """Within the block, torch's random functions of ``TORCH_DRAWS`` and ``torch.nn.functional.dropout``
    draw through ``tape`` (step_probe._Tape); restored after."""
    functional = torch.nn.functional
    found = [(torch, name, kind) for name, kind in TORCH_DRAWS.items() if hasattr(torch, name)]
    found.append((functional, "dropout", "dropout"))
    originals = [(module, name, getattr(module, name)) for module, name, _ in found]
    for (module, name, kind), (_, _, function) in zip(found, originals, strict=True):
        setattr(module, name, _taped(function, tape, name, kind))
    try:
        yield
    finally:
        for module, name, function in originals:
            setattr(module, name, function)


def replayed_names() -> tuple[str, ...]:
    """The tape's names of these draws, each replayed by rows."""
    return (*(f"torch.{name}" for name in TORCH_DRAWS), "torch.dropout")
