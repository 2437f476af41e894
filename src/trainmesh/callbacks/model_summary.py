"""A table of a model's layers and parameter counts, printed when fit starts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch.nn.parameter import UninitializedParameter

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView

_COUNT_LABELS = ("", "K", "M", "B", "T")


class SummaryRow(NamedTuple):
    """One layer of the table: its position, dotted name, class name and parameter count."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the row's position
    name: str
    type_name: str
    params: int


@dataclass
class SummaryTable:
    """Parameter counts of a module; build it with :func:`summarize`.

    Parameters shared between layers count once in the totals. Lazy layers'
    not-yet-initialized parameters count as 0 and set ``has_uninitialized``.
    """

    rows: list[SummaryRow] = field(default_factory=list)
    trainable: int = 0
    non_trainable: int = 0
    size_mb: float = 0.0
    has_uninitialized: bool = False

    @property
    def total(self) -> int:
        return self.trainable + self.non_trainable


def summarize(module: torch.nn.Module, max_depth: int = 1) -> SummaryTable:
    """Count the parameters of ``module`` and of its layers down to ``max_depth`` levels.

    ``max_depth=1`` lists the direct children, ``-1`` every layer, ``0`` only the totals.
    Parameters on the meta device are counted from their shape; no data is read.

    >>> table = summarize(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)))
    >>> [row.params for row in table.rows], table.total
    ([8320, 1290], 9610)
    """
    if max_depth < -1:
        raise ValueError(
            f"max_depth={max_depth} is not a depth: use 1 for the top-level layers, a larger "
            "number for nested ones, -1 for every layer, or 0 for the totals only."
        )
    table = SummaryTable()
    # parameters() yields a parameter shared by several layers once, so totals count it once.
    for param in module.parameters():
        if isinstance(param, UninitializedParameter):
            table.has_uninitialized = True
            continue
        count = param.numel()
        if param.requires_grad:
            table.trainable += count
        else:
            table.non_trainable += count
        table.size_mb += count * param.element_size() / 1e6

    # named_modules() also yields a shared layer once; "" is the root, which the totals cover.
    layers = [
        (name, layer)
        for name, layer in module.named_modules()
        if name and (max_depth == -1 or name.count(".") < max_depth)
    ]
    for index, (name, layer) in enumerate(layers):
        table.rows.append(SummaryRow(index, name, type(layer).__name__, _count_params(layer)))
    return table


def _count_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if not isinstance(p, UninitializedParameter))


def human_readable_count(number: int) -> str:
    """Abbreviate a count with K, M, B, T, as Lightning's summary does.

    >>> [human_readable_count(n) for n in (999, 1_000, 1_290, 100_000, 2_100_000, 1_200_000_000)]
    ['999', '1.0 K', '1.3 K', '100 K', '2.1 M', '1.2 B']
    """
    assert number >= 0, number
    digits = int(math.floor(math.log10(number))) + 1 if number > 0 else 1
    group = min(math.ceil(digits / 3), len(_COUNT_LABELS)) - 1
    scaled = number / 10 ** (3 * group)
    if group == 0:
        return str(number)
    # Three significant digits at most: "100 K" rather than "100.0 K".
    text = f"{int(scaled):,d}" if scaled >= 100 else f"{scaled:,.1f}"
    return f"{text} {_COUNT_LABELS[group]}"


def format_summary(summary: SummaryTable) -> str:
    """Render a :class:`SummaryTable` as a text table followed by the totals.

    >>> print(format_summary(summarize(torch.nn.Sequential(torch.nn.Linear(2, 2)))))
      | Name | Type   | Params
    --------------------------------
    0 | 0    | Linear | 6
    --------------------------------
    6         Trainable params
    0         Non-trainable params
    6         Total params
    0.000     Total estimated model params size (MB)
    """
    header = ("", "Name", "Type", "Params")
    cells = [(str(r.index), r.name, r.type_name, human_readable_count(r.params)) for r in summary.rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    rule = "-" * max(len(line(header)) + 6, 30)
    lines = [line(header), rule, *(line(row) for row in cells)]
    if cells:
        lines.append(rule)
    totals = [
        (human_readable_count(summary.trainable), "Trainable params"),
        (human_readable_count(summary.non_trainable), "Non-trainable params"),
        (human_readable_count(summary.total), "Total params"),
        (f"{summary.size_mb:,.3f}", "Total estimated model params size (MB)"),
    ]
    lines.extend(f"{value:<10}{label}" for value, label in totals)
    if summary.has_uninitialized:
        lines.append("Lazy layers are not initialized yet: their parameters are not counted.")
    return "\n".join(lines)


class ModelSummary(Callback):
    """Print the model's layers and parameter counts when ``fit`` starts, on global rank 0.

    ``max_depth`` is as in :func:`summarize`; ``0`` turns the printout off.

    Args:
        max_depth: the depth of submodules listed (0 turns the printout off) (default ``1``).

    Examples:
        >>> trainer = Trainer(callbacks=[ModelSummary(max_depth=2)])  # doctest: +SKIP
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        # summarize_kwargs: what Lightning's RichModelSummary(max_depth, **summarize_kwargs)
        # takes for its styling; the table here has one look, so they are kept but not used.
        if max_depth < -1:
            raise ValueError(
                f"ModelSummary(max_depth={max_depth}): use 1 for the top-level layers, a larger "
                "number for nested ones, -1 for every layer, or 0 to print nothing."
            )
        self.max_depth = max_depth
        self.summarize_kwargs = summarize_kwargs

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if self.max_depth == 0 or not getattr(trainer, "is_global_zero", True):
            return
        _forward_example_input(pl_module)
        print(format_summary(summarize(pl_module, self.max_depth)), flush=True)


def _forward_example_input(module: Any) -> None:
    """Lightning's summary runs ``example_input_array`` through the model (batch-transfer hooks,
    eval mode, no_grad; modes restored) at the start of fit: a forward that draws random numbers
    moves the RNG, and the trained numbers depend on it, so it runs here too."""
    example = getattr(module, "example_input_array", None)
    if example is None or not callable(getattr(module, "_apply_batch_transfer_handler", None)):
        return
    example = module._apply_batch_transfer_handler(module._on_before_batch_transfer(example))
    modes = {m: m.training for m in module.modules()}
    module.eval()
    with torch.no_grad():
        if isinstance(example, (list, tuple)):
            module(*example)
        elif isinstance(example, dict):
            module(**example)
        else:
            module(example)
    for m, training in modes.items():
        m.training = training


# Lightning's name for its rich summary; it replaces the default summary as ModelSummary does.
RichModelSummary = ModelSummary
