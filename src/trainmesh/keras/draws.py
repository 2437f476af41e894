"""A step's random draws under several processes: the rows one process draws at the global batch.

One process at a global batch of ``G`` draws, in a step, a Dropout mask of ``G`` rows, or keras-io's
GAN guide draws ``keras.random.normal((G, latent_dim), seed=self.seed_generator)``. Each of ``N``
processes at ``b = G / N`` starts the step from the same generator states (every process runs the
same program from the same seed, and rank 0's variables, seed generators included, are broadcast
when training begins), so without this each draws the *same* ``b`` rows: every process's samples
get the first rows of one process's draw, and the run differs from one process's, silently
(measured: the guide's GAN 2.4e-3 apart; a Dropout classifier too).

So within a training or evaluation step (and a prediction step of split arrays), each of Keras'
random functions of the torch backend (``keras.src.backend.random``: ``normal``, ``uniform``,
``randint``, ``truncated_normal``, ``dropout``) that is asked for a batch-shaped draw, one whose
first dimension is ``k`` times this process's batch (``k`` stacked batch-sized parts, as the GAN's
``concat([generated, real])`` labels), draws what one process draws at the global batch, ``k G``
rows, from the same generator state, and keeps this process's rows: the rows its samples hold in
one process's batch (samples ``r, r + N, ...`` of split arrays and of a split DataLoader; one block
after another of a split PyDataset's batches). Every process then holds one process's numbers, and
the generators (a ``SeedGenerator``'s state, torch's global generator) move on as one process's.
A draw of another shape (a scalar, a per-feature vector) is the same on every process, as in one
process. Each process draws ``N`` times the rows it keeps (Dropout: a mask of the global batch).

``gamma``, ``binomial`` and ``beta`` of batch shape are mapped alike where their parameters are numbers
(keras-io's MixUp draws its mixing weights from two ``gamma`` of shape ``(batch, 1)``). Draws no row map
can reproduce (``categorical`` of a batch's logits, ``shuffle`` of a batch, ``gamma``/``binomial``/``beta``
whose parameters are tensors; a batch-shaped draw while predicting a PyDataset or a DataLoader, whose
processes predict runs of batches that start at different generator states) are refused at the draw,
before that step updates anything. Draws from torch's own functions in a step of the program's own
(``torch.randn_like``) are mapped alike: torch_draws.py.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras.backend import require_keras
from trainmesh.runtime import Runtime

MAPPED = ("normal", "uniform", "randint", "truncated_normal", "dropout")
UNMAPPABLE = ("categorical", "shuffle")
# Mapped where their parameters are numbers (one per draw: drawing the global batch's shape and keeping this
# process's rows is one process's draw), refused where a parameter is a tensor (its other processes' rows
# are not here): keras-io's MixUp samples its mixing weights from two gammas of the batch's shape.
MAPPED_WITH_NUMBERS = ("gamma", "binomial", "beta")


class StepRows:
    """Where this process's batch of the running step sits in one process's global batch."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.local: int | None = None  # this process's batch in the running step (None: no step runs)
        self.sizes: list[int] | None = None  # every process's batch at this step, once known
        self.blocks = False  # the processes' batches are consecutive blocks (else interleaved r, r + N, ...)
        self.refusal: str | None = None  # why a batch-shaped draw cannot be mapped in this step

    def begin(self, local: int, sizes: list[int] | None, *, blocks: bool, refusal: str | None = None) -> None:
        """A step of ``local`` samples here begins; ``sizes``: every process's (None: summed at the first draw)."""
        self.local, self.sizes, self.blocks, self.refusal = local, sizes, blocks, refusal

    def end(self) -> None:
        self.local = None

    def every_size(self) -> list[int]:
        if self.sizes is None:  # every process takes every training step and draws alike: one small sum
            world, rank = self.runtime.world_size, self.runtime.global_rank
            mine = torch.zeros(world, dtype=torch.float64)
            mine[rank] = float(self.local or 0)
            self.sizes = [int(v) for v in self.runtime.all_reduce(mine, "sum").tolist()]
        return self.sizes

    def rows(self, parts: int) -> tuple[int, torch.Tensor]:
        """The global batch's size, and this process's rows of ``parts`` stacked batch-sized parts."""
        sizes, rank = self.every_size(), self.runtime.global_rank
        total = sum(sizes)
        if self.blocks:
            start = sum(sizes[:rank])
            base = torch.arange(start, start + sizes[rank])
        else:
            base = torch.arange(rank, rank + len(sizes) * sizes[rank], len(sizes))
        return total, torch.cat([part * total + base for part in range(parts)])


def global_batch_like(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """Zeros of ``tensor``'s shape with ``rows`` rows, laid out in memory as ``tensor`` is.

    torch draws on a tensor (``F.dropout``, ``randn_like``, ``x.normal_()``, ``bernoulli``) fill it in
    memory order, and by another algorithm where it is not contiguous: Keras' ``Conv1D``/``Conv2D`` leave
    their outputs channels-first in memory (a permuted view), so a contiguous global batch would give each
    row other numbers than one process's draw on its own (keras-io's anomaly autoencoder: History 1.6e-2
    apart). A layout that is not dense (a broadcast view) is drawn contiguous, as ``empty_like`` does."""
    shape = (rows, *tensor.shape[1:])
    if tensor.dim() < 2 or tensor.is_contiguous() or torch.empty_like(tensor).stride() != tensor.stride():
        return tensor.new_zeros(shape)
    strides = tensor.stride()
    order = sorted(range(tensor.dim()), key=lambda d: -strides[d])  # outermost in memory first
    return tensor.new_zeros([shape[d] for d in order]).permute([order.index(d) for d in range(tensor.dim())])


def plan_sizes(shares: tuple[int, ...], batch_size: int, step: int) -> list[int]:
    """Each process's batch at ``step`` of a pass over split arrays."""
    return [max(0, min(batch_size, share - step * batch_size)) for share in shares]


PREDICTING_BATCHES = (
    "while predicting a PyDataset or a DataLoader (each process predicts a run of the batches, starting from "
    "the generator states one process has at the first batch)"
)
EVALUATING_BATCHES = (
    "in an evaluation whose batch sizes are not known in advance (a PyDataset, a DataLoader, or steps=): the "
    "processes may take different numbers of evaluation steps, so no step can gather every process's batch size"
)
_drawing = [False]  # inside a mapped draw: Keras' own functions it calls (truncated_normal's normal) are Keras'


def _parts(rows: StepRows, leading: Any) -> int:
    """How many batch-sized parts a draw whose first dimension is ``leading`` stacks (0: not batch-shaped)."""
    local = rows.local
    try:
        leading = operator.index(leading)  # an int, a numpy integer, a torch.Size entry
    except TypeError:
        return 0
    if local is None or _drawing[0] or not local or leading <= 0:
        return 0
    return leading // local if leading % local == 0 else 0


def _refuse(rows: StepRows, name: str, module: str = "keras.random") -> None:
    raise ValueError(
        f"{module}.{name} drew a batch-shaped sample in a step under {rows.runtime.world_size} processes, "
        f"{rows.refusal or 'that no rows of the draw one process makes can reproduce'}: each "
        "process would draw other numbers than one process at the global batch, silently. Draw it outside the "
        "step and pass it with the data (each sample keeps its draw on whichever process trains it), or run on "
        "one process"
    )


def _on_rows(keras_draw: Callable[..., Any], rows: StepRows, name: str) -> Callable[..., Any]:
    @functools.wraps(keras_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        from keras.src.backend.torch.core import get_device

        key = "inputs" if name == "dropout" else "shape"
        first: Any = args[0] if args else kwargs.get(key)
        leading = tuple(first.shape if name == "dropout" else first or ())[:1]
        parts = _parts(rows, leading[0]) if leading and get_device() != "meta" else 0
        if not parts:
            return keras_draw(*args, **kwargs)
        if rows.refusal is not None:
            _refuse(rows, name)
        total, mine = rows.rows(parts)
        _drawing[0] = True
        try:
            if name == "dropout":  # the mask of the global batch, this process's inputs at their rows
                inputs = first
                whole = global_batch_like(inputs, parts * total)
                whole = whole.index_put((mine.to(inputs.device),), inputs)
                rest = {k: v for k, v in kwargs.items() if k != key}
                more = _global_noise_shape(list(args[1:]), rest, len(inputs), len(whole))
                return keras_draw(whole, *more, **rest)[mine.to(inputs.device)]
            shape = (parts * total, *tuple(first)[1:])
            out = keras_draw(shape, *args[1:], **{k: v for k, v in kwargs.items() if k != key})
            return out[mine.to(out.device)]
        finally:
            _drawing[0] = False

    return draw


def _global_noise_shape(args: list[Any], kwargs: dict[str, Any], local: int, total: int) -> list[Any]:
    """``dropout``'s arguments after the inputs, with a ``noise_shape`` of this process's batch
    (SpatialDropout's ``(batch, 1, 1, channels)``: one mask per sample and channel) made the global
    batch's, in place in ``kwargs``; a noise shape that is not per sample (``None`` or 1 first) stays."""
    noise = args[1] if len(args) > 1 else kwargs.get("noise_shape")
    if noise is None or not len(noise) or noise[0] != local:
        return args
    noise = (total, *tuple(noise)[1:])
    if len(args) > 1:
        return [args[0], noise, *args[2:]]
    kwargs["noise_shape"] = noise
    return args


def _refusing(keras_draw: Callable[..., Any], rows: StepRows, name: str) -> Callable[..., Any]:
    @functools.wraps(keras_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else next(iter(kwargs.values()), None)
        shape = getattr(first, "shape", first)
        leading = tuple(shape or ())[:1] if isinstance(shape, (tuple, list, torch.Size)) else ()
        if leading and _parts(rows, leading[0]):
            _refuse(rows, name)
        return keras_draw(*args, **kwargs)

    return draw


def _numbers_only(keras_draw: Callable[..., Any], rows: StepRows, name: str) -> Callable[..., Any]:
    """Mapped where every parameter is a number (or a tensor of one), refused at a batch-shaped draw otherwise."""
    mapped, refused = _on_rows(keras_draw, rows, name), _refusing(keras_draw, rows, name)

    @functools.wraps(keras_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        given = [*args[1:], *kwargs.values()]  # the shape first; a seed or a dtype has no shape
        numbers = all(math.prod(tuple(p.shape)) == 1 for p in given if hasattr(p, "shape"))
        return (mapped if numbers else refused)(*args, **kwargs)

    return draw


@contextlib.contextmanager
def keras_at_the_global_batch(rows: StepRows) -> Iterator[None]:
    """Keras' random functions map batch-shaped draws to ``rows`` within the block (several processes);
    global_draws.py adds torch's own."""
    if rows.runtime.world_size == 1:
        yield
        return
    require_keras()
    from keras.src import backend as keras_backend

    module = keras_backend.random
    every = (*MAPPED, *UNMAPPABLE, *MAPPED_WITH_NUMBERS)
    keras_functions = {name: getattr(module, name) for name in every if hasattr(module, name)}
    for name, function in keras_functions.items():
        wrap = _on_rows if name in MAPPED else _numbers_only if name in MAPPED_WITH_NUMBERS else _refusing
        setattr(module, name, wrap(function, rows, name))
    try:
        yield
    finally:
        for name, function in keras_functions.items():
            setattr(module, name, function)
