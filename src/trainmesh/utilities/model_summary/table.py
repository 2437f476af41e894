"""Lightning's model summary table (``lightning.pytorch.utilities.model_summary``): a module's layers
with their parameter counts, training modes and FLOPs and, where the module has an
``example_input_array``, the sizes each layer took and gave in one forward of it; printed as
Lightning 2.6 prints it (tests/callbacks/test_model_summary_as_lightning.py)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch.nn.parameter import UninitializedParameter
from torch.utils.hooks import RemovableHandle

from trainmesh.utilities.rank_zero import WarningCache

__all__ = ["SummaryRow", "SummaryTable", "format_summary", "human_readable_count", "summarize"]

UNKNOWN_SIZE = "?"  # Lightning's: a layer the example did not reach, or an input without a shape
LEFTOVER_PARAMS_NAME = "other params"
NOT_APPLICABLE = "n/a"
_COUNT_LABELS = ("", "K", "M", "B", "T")
# Lightning's model_summary.warning_cache: its words once per process, as a lazy layer is counted.
_WARNINGS = WarningCache()
UNINITIALIZED_WARNING = (
    "The total number of parameters detected may be inaccurate because the model contains"
    " an instance of `UninitializedParameter`. To get an accurate number, set `self.example_input_array`"
    " in your LightningModule."
)


class SummaryRow(NamedTuple):
    """One layer of the table: its position, dotted name, class name, parameter count, training mode,
    FLOPs in the example's forward, and the sizes it took and gave there (``"?"`` where unknown)."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the row's position
    name: str
    type_name: str
    params: int
    training: bool = True
    flops: int = 0
    in_size: Any = UNKNOWN_SIZE
    out_size: Any = UNKNOWN_SIZE


@dataclass
class SummaryTable:
    """Parameter counts of a module; build it with :func:`summarize`, print it with ``str()``.

    Parameters shared between layers count once in the totals. Lazy layers'
    not-yet-initialized parameters count as 0 and set ``has_uninitialized``. ``with_sizes``: the
    module had an ``example_input_array``, so the table has Lightning's "In sizes" / "Out sizes".
    """

    rows: list[SummaryRow] = field(default_factory=list)
    trainable: int = 0
    non_trainable: int = 0
    size_mb: float = 0.0
    has_uninitialized: bool = False
    train_modules: int = 0
    eval_modules: int = 0
    total_flops: int = 0
    with_sizes: bool = False

    @property
    def total(self) -> int:
        return self.trainable + self.non_trainable

    @property
    def in_sizes(self) -> list[Any]:
        """Lightning's ``ModelSummary.in_sizes``: each row's input size."""
        return [row.in_size for row in self.rows]

    @property
    def out_sizes(self) -> list[Any]:
        """Lightning's ``ModelSummary.out_sizes``: each row's output size."""
        return [row.out_size for row in self.rows]

    def __str__(self) -> str:
        return format_summary(self)


class _Sizes:
    """Lightning's ``LayerSummary`` hook: the first forward's input and output sizes, then removed."""

    def __init__(self, layer: torch.nn.Module) -> None:
        self.in_size: Any = UNKNOWN_SIZE
        self.out_size: Any = UNKNOWN_SIZE
        self.handle: RemovableHandle | None = None
        if not isinstance(layer, torch.jit.ScriptModule):
            self.handle = layer.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, _: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        taken = (*args, *kwargs.values()) if kwargs is not None else args
        self.in_size = batch_shape(taken[0] if len(taken) == 1 else taken) or UNKNOWN_SIZE
        self.out_size = batch_shape(out) or UNKNOWN_SIZE
        self.detach()

    def detach(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def batch_shape(batch: Any) -> Any:
    """Lightning's ``parse_batch_shape``: a tensor's shape as a list, nested for lists and tuples."""
    if hasattr(batch, "shape"):
        return list(batch.shape)
    if isinstance(batch, (list, tuple)):
        return [batch_shape(element) for element in batch]
    return UNKNOWN_SIZE


def summarize(module: torch.nn.Module, max_depth: int = 1) -> SummaryTable:
    """Count the parameters of ``module`` and of its layers down to ``max_depth`` levels.

    ``max_depth=1`` lists the direct children, ``-1`` every layer, ``0`` only the totals.
    Parameters on the meta device are counted from their shape; no data is read. Where the module
    has an ``example_input_array``, it is run through the module once as Lightning's summary runs
    it (batch-transfer hooks, eval mode, ``no_grad``, modes restored), recording each layer's sizes
    and FLOPs.

    >>> table = summarize(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)))
    >>> [row.params for row in table.rows], table.total
    ([8320, 1290], 9610)
    """
    if not isinstance(max_depth, int) or max_depth < -1:
        raise ValueError(  # Lightning's words first (its tests match them), then how to choose
            f"`max_depth` can be -1, 0 or > 0, got {max_depth}. Use 1 for the top-level layers, a larger "
            "number for nested ones, -1 for every layer, or 0 for the totals only."
        )
    layers = summary_layers(module, max_depth)
    sizes = [_Sizes(layer) for _, layer in layers]
    flops: dict[str, dict[Any, int]] = {}
    with_sizes = getattr(module, "example_input_array", None) is not None
    if with_sizes:
        flops = forward_example_input(module, max_depth)
    for recorder in sizes:
        recorder.detach()
    # Counted after the example's forward, as Lightning counts: it initializes lazy layers.
    table = _totals(module)
    table.with_sizes = with_sizes
    modes = [m.training for m in list(module.modules())[1:]]
    table.train_modules, table.eval_modules = modes.count(True), modes.count(False)
    table.total_flops = sum(flops.get("Global", {}).values())
    kept = [(n, layer, s) for (n, layer), s in zip(layers, sizes) if max_depth < 1 or n.count(".") < max_depth]
    for index, (name, layer, recorded) in enumerate(kept):
        layer_flops = sum(flops.get(f"{type(module).__name__}.{name}", {}).values())
        row = (name, type(layer).__name__, _count_params(layer), layer.training, layer_flops)
        table.rows.append(SummaryRow(index, *row, recorded.in_size, recorded.out_size))
    return table


def summary_layers(module: torch.nn.Module, max_depth: int) -> list[tuple[str, torch.nn.Module]]:
    """Lightning's choice of layers: the children at depth 1, else every module but the root (deeper
    ones than ``max_depth`` dropped after the forward, so the hooks see the same calls)."""
    if max_depth == 0:
        return []
    if max_depth == 1:
        return list(module.named_children())
    return list(module.named_modules())[1:]


def reread_size_columns(table: SummaryTable, module: torch.nn.Module) -> None:
    """Lightning's summary data (``_get_summary_data``, 1.9.5 and 2.6) reads ``example_input_array``
    once more to choose the "In sizes"/"Out sizes" columns, on every rank. A property that draws
    random numbers there (``next(iter(self.val_dataloader()))`` draws a DataLoader iterator's seed
    from the global generator) moves the generator a third time, and the trained numbers follow it.
    """
    table.with_sizes = getattr(module, "example_input_array", None) is not None


def _totals(module: torch.nn.Module) -> SummaryTable:
    table = SummaryTable()
    # parameters() yields a parameter shared by several layers once, so totals count it once.
    for param in module.parameters():
        if isinstance(param, UninitializedParameter):
            table.has_uninitialized = True
            _WARNINGS.warn(UNINITIALIZED_WARNING)
            continue
        count = param.numel()
        if param.requires_grad:
            table.trainable += count
        else:
            table.non_trainable += count
        table.size_mb += count * param.element_size() / 1e6
    return table


def forward_example_input(module: Any, max_depth: int = 1) -> dict[str, dict[Any, int]]:
    """Lightning's summary runs ``example_input_array`` through the model (batch-transfer hooks,
    eval mode, no_grad, a ``FlopCounterMode``; modes restored) at the start of fit: a forward that
    draws random numbers moves the RNG, and the trained numbers depend on it, so it runs here too.
    Returns the FLOP counts by module name (``"Global"``: the whole forward)."""
    from torch.utils.flop_counter import FlopCounterMode  # only where a summary runs an example

    example = module.example_input_array
    if callable(getattr(module, "_apply_batch_transfer_handler", None)):
        example = module._apply_batch_transfer_handler(module._on_before_batch_transfer(example))
    modes = {m: m.training for m in module.modules()}
    module.eval()
    counter = FlopCounterMode(display=False, depth=max_depth + 1)
    with torch.no_grad(), counter if not _has_script_module(module) else contextlib.nullcontext():
        if isinstance(example, (list, tuple)):
            module(*example)
        elif isinstance(example, dict):
            module(**example)
        else:
            module(example)
    for m, training in modes.items():
        m.training = training
    return counter.get_flop_counts()


def _has_script_module(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.jit.ScriptModule) for m in module.modules())


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


def _cell_count(number: int) -> str:
    # Lightning's get_human_readable_count writes a count under 1000 with its empty unit, "40  ",
    # and the table's column widths count those two spaces.
    return human_readable_count(number) + ("  " if number < 1000 else "")


def format_summary(summary: SummaryTable) -> str:
    """Render a :class:`SummaryTable` as Lightning 2.6's ``ModelSummary`` prints it.

    >>> print(format_summary(summarize(torch.nn.Sequential(torch.nn.Linear(2, 2)))))  # doctest: +NORMALIZE_WHITESPACE
      | Name | Type   | Params | Mode  | FLOPs
    ------------------------------------------------
    0 | 0    | Linear | 6      | train | 0
    ------------------------------------------------
    6         Trainable params
    0         Non-trainable params
    6         Total params
    0.000     Total estimated model params size (MB)
    1         Modules in train mode
    0         Modules in eval mode
    0         Total Flops
    """
    return "\n".join([*_table_lines(summary_columns(summary)), *_total_lines(summary)])


def summary_columns(summary: SummaryTable) -> list[tuple[str, list[str]]]:
    """Lightning's ``_get_summary_data``: each column's header and cells (what both summaries print)."""
    rows = summary.rows
    columns: list[tuple[str, list[str]]] = [
        (" ", [str(r.index) for r in rows]),
        ("Name", [r.name for r in rows]),
        ("Type", [r.type_name for r in rows]),
        ("Params", [_cell_count(r.params) for r in rows]),
        ("Mode", ["train" if r.training else "eval" for r in rows]),
        ("FLOPs", [_cell_count(r.flops) for r in rows]),
    ]
    if summary.with_sizes:
        columns += [("In sizes", [str(r.in_size) for r in rows]), ("Out sizes", [str(r.out_size) for r in rows])]
    leftover = summary.total - sum(r.params for r in rows)
    if leftover > 0:  # parameters of no listed layer: Lightning's "other params" row
        extra = [" ", LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, _cell_count(leftover)] + [NOT_APPLICABLE] * 4
        for (_, cells), cell in zip(columns, extra):
            cells.append(cell)
    return columns


def _table_lines(columns: list[tuple[str, list[str]]]) -> list[str]:
    """Lightning's ``_format_summary_table``: widths from the cells and headers, no trailing strip."""
    widths = [max([len(header), *(len(cell) for cell in cells)]) for header, cells in columns]
    rule = "-" * (sum(widths) + 3 * (1 + len(columns)))
    lines = [" | ".join(header.ljust(width) for (header, _), width in zip(columns, widths)), rule]
    for i in range(len(columns[0][1])):
        lines.append(" | ".join(cells[i].ljust(width) for (_, cells), width in zip(columns, widths)))
    return [*lines, rule]


def _total_lines(summary: SummaryTable) -> list[str]:
    totals = [
        (_cell_count(summary.trainable), "Trainable params"),
        (_cell_count(summary.non_trainable), "Non-trainable params"),
        (_cell_count(summary.total), "Total params"),
        (f"{summary.size_mb:,.3f}", "Total estimated model params size (MB)"),
        (str(summary.train_modules), "Modules in train mode"),
        (str(summary.eval_modules), "Modules in eval mode"),
        (_cell_count(summary.total_flops), "Total Flops"),
    ]
    return [f"{value:<10}{label}" for value, label in totals]
