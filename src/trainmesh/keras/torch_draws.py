"""torch's own random functions drawn in a step under several processes: the rows one process draws.

draws.py gives each process its rows of what one process draws at the global batch for Keras' random
functions. A ``train_step`` of the program's own may draw from torch's global generator directly
(``torch.randn_like(y)`` noising its targets, ``torch.nn.functional.dropout`` of a torch module): each
process drew its own part from the same generator state, the first rows of one process's draw for every
process's samples, and the run differed from one process's, silently (keras_random_programs'
``torch_drawing_step``: History 0.083 apart at 2 x 16 against Keras' own fit at 32).

Within a training or evaluation step, each of these functions asked, on torch's global generator or a
``torch.Generator`` of the program's own (``generator=g``: alike on every process, seeded by the same
program; before, not mapped, and the step probe refused it as a loss "not a mean": its halves drew other
numbers), for a batch-shaped draw (first dimension ``k`` times this process's batch) draws the global
batch's shape and keeps this process's rows (draws.StepRows): sizes are made the global batch's
(``randn``, ``rand``, ``randint``), a ``*_like`` draws like an empty tensor of the global batch's shape, and
the tensors of ``bernoulli``, ``normal`` and ``dropout`` are put at this process's rows of zeros of the global
batch's shape (each draws one number per entry whatever its value: the rows come out as one process's).
``poisson`` and ``multinomial`` of batch shape (their draws depend on the values) are refused at the draw.
Calls made by Keras' own random functions (mapped by draws.py) are theirs, and left alone.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras import draws
from trainmesh.keras.probe_torch_draws import TORCH_DRAWS, leading

REFUSED = ("poisson", "multinomial")
_SHAPES = (tuple, list, torch.Size)


def _global_sizes(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any], rows: int) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of a sized draw with its first dimension made ``rows``."""
    if "size" in kwargs:
        size = tuple(kwargs["size"])
        return args, {**kwargs, "size": (rows, *size[1:])}
    if kind == "sizes":
        if args and isinstance(args[0], _SHAPES):
            return ((rows, *tuple(args[0])[1:]), *args[1:]), kwargs
        return (rows, *args[1:]), kwargs
    index = next(i for i, a in enumerate(args) if isinstance(a, _SHAPES))  # randint(low, high, size)
    size = tuple(args[index])
    return (*args[:index], (rows, *size[1:]), *args[index + 1 :]), kwargs


def _at_rows(value: Any, first: int, rows: int, mine: torch.Tensor) -> Any:
    """A tensor of batch shape put at this process's rows of zeros of the global batch's shape."""
    if not isinstance(value, torch.Tensor) or not value.dim() or value.shape[0] != first:
        return value
    whole = draws.global_batch_like(value, rows)
    whole[mine.to(value.device)] = value
    return whole


def _mapped(torch_draw: Callable[..., Any], rows: draws.StepRows, name: str, kind: str) -> Callable[..., Any]:
    @functools.wraps(torch_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        if draws._drawing[0]:  # Keras' own draw (a generator of the program's own is mapped: one process's rows)
            return torch_draw(*args, **kwargs)
        if kind == "dropout":
            p, training = (list(args[1:3]) + [kwargs.get("p", 0.5), kwargs.get("training", True)][len(args[1:3]) :])[:2]
            if not training or not p:
                return torch_draw(*args, **kwargs)
        first = leading("tensor" if kind in ("dropout", "refused") else kind, args, kwargs)
        parts = draws._parts(rows, first) if first else 0
        if not parts or first is None:
            return torch_draw(*args, **kwargs)
        if rows.refusal is not None or kind == "refused":
            draws._refuse(rows, name.rpartition(".")[2], module=name.rpartition(".")[0])
        total, mine = rows.rows(parts)
        whole = parts * total
        draws._drawing[0] = True
        try:
            sized = kind == "normal" and not isinstance(args[0] if args else kwargs.get("mean"), torch.Tensor)
            if kind in ("sizes", "size") or sized:
                args, kwargs = _global_sizes("sizes" if kind == "sizes" else "size", args, kwargs, whole)
            elif kind == "tensor" and name.endswith("_like"):
                tensor = args[0] if args else kwargs.pop("input")
                args = (draws.global_batch_like(tensor, whole), *args[1:])
            else:  # bernoulli, normal, dropout: their tensors at this process's rows
                args = tuple(_at_rows(a, first, whole, mine) for a in args)
                kwargs = {k: _at_rows(v, first, whole, mine) for k, v in kwargs.items()}
                if kind == "dropout":
                    kwargs.pop("inplace", None)
                    args = args[:3]
            out = torch_draw(*args, **kwargs)
            return out[mine.to(out.device)]
        finally:
            draws._drawing[0] = False

    return draw


@contextlib.contextmanager
def torch_at_the_global_batch(rows: draws.StepRows) -> Iterator[None]:
    """torch's random functions map batch-shaped draws to ``rows`` within the block (several processes)."""
    if rows.runtime.world_size == 1:
        yield
        return
    functional = torch.nn.functional
    found = [(torch, name, kind) for name, kind in TORCH_DRAWS.items() if name not in REFUSED]
    found += [(torch, name, "refused") for name in REFUSED] + [(functional, "dropout", "dropout")]
    originals = [(module, name, getattr(module, name)) for module, name, _ in found]
    for (module, name, kind), (_, _, function) in zip(found, originals, strict=True):
        setattr(module, name, _mapped(function, rows, f"{module.__name__}.{name}", kind))
    try:
        yield
    finally:
        for module, name, function in originals:
            setattr(module, name, function)
