"""Lightning's summary objects over trainmesh's table: ``ModelSummary(model, max_depth)`` (what
Lightning's ``summarize`` returns; its columns as lists, its totals, ``str()`` the printed table),
``LayerSummary`` (one layer's sizes from its first forward) and the number formatters."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from trainmesh.utilities.model_summary.table import (
    SummaryTable,
    _cell_count,
    _count_params,
    _Sizes,
    batch_shape,
    forward_example_input,
    reread_size_columns,
    summary_layers,
)
from trainmesh.utilities.model_summary.table import (
    summarize as summary_table,
)
from trainmesh.utilities.rank_zero import rank_zero_warn

__all__ = [
    "LayerSummary",
    "ModelSummary",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]


def get_human_readable_count(number: int) -> str:
    """A count with Lightning's units (" ", K, M, B, T): ``"999  "``, ``"1.3 K"``, ``"100 K"``.

    Examples:
        >>> get_human_readable_count(1290), get_human_readable_count(12)
        ('1.3 K', '12  ')
    """
    return _cell_count(number)


def get_formatted_model_size(total_model_size: float) -> str:
    """A size in MB with three decimals and thousands separators, as the summary prints it.

    Examples:
        >>> get_formatted_model_size(1234.56789)
        '1,234.568'
    """
    return f"{total_model_size:,.3f}"


def parse_batch_shape(batch: Any) -> Any:
    """A tensor's shape as a list, nested for lists and tuples; ``"?"`` for anything else.

    Examples:
        >>> parse_batch_shape([torch.zeros(2, 3), (torch.zeros(4),)])
        [[2, 3], [[4]]]
    """
    return batch_shape(batch)


class LayerSummary(_Sizes):
    """One layer: the sizes it took and gave in its first forward after this was made (``"?"``
    until then), its class name, parameter count and training mode.

    Args:
        module: the layer.

    Examples:
        >>> layer = LayerSummary(torch.nn.Linear(3, 2)); _ = layer._module(torch.zeros(5, 3))
        >>> layer.in_size, layer.out_size, layer.num_parameters, layer.layer_type
        ([5, 3], [5, 2], 8, 'Linear')
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__(module)
        self._module = module
        self._hook_handle = self.handle  # Lightning's name; kept once removed (its tests read it)

    def detach_hook(self) -> None:
        """Stop recording sizes (the hook removes itself after the first forward anyway)."""
        self.detach()

    @property
    def layer_type(self) -> str:
        return type(self._module).__name__

    @property
    def num_parameters(self) -> int:
        return _count_params(self._module)

    @property
    def training(self) -> bool:
        return self._module.training


class ModelSummary:
    """Lightning's summary of a module's layers down to ``max_depth`` (1: its children; -1: every
    layer; 0: the totals only); ``str()`` is the table Lightning prints.

    Args:
        model: the module.
        max_depth: how deep to list layers.

    Examples:
        >>> summary = ModelSummary(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
        >>> summary.layer_names, summary.param_nums, summary.total_parameters
        (['0', '1'], [15, 0], 15)
    """

    def __init__(self, model: torch.nn.Module, max_depth: int = 1) -> None:
        self._model = model
        self._max_depth = max_depth
        warn_of_an_unsized_precision(model)
        self._table: SummaryTable = summary_table(model, max_depth)

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def summarize(self) -> dict[str, LayerSummary]:
        """Lightning's: the layers down to ``max_depth`` by name, each a :class:`LayerSummary` whose sizes
        the module's ``example_input_array`` (run through it once more, where it has one) recorded; their
        hooks removed. The table ``str()`` prints stays the one made with the summary, as Lightning's.

        >>> summary = ModelSummary(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
        >>> {name: layer.num_parameters for name, layer in summary.summarize().items()}
        {'0': 15, '1': 0}
        """
        layers = OrderedDict(
            (name, LayerSummary(layer)) for name, layer in summary_layers(self._model, self._max_depth)
        )
        if getattr(self._model, "example_input_array", None) is not None:
            forward_example_input(self._model, self._max_depth)
        for layer in layers.values():
            layer.detach_hook()
        if self._max_depth >= 1:
            for name in [name for name in layers if name.count(".") >= self._max_depth]:
                del layers[name]
        return layers

    @property
    def layer_names(self) -> list[str]:
        return [row.name for row in self._table.rows]

    @property
    def layer_types(self) -> list[str]:
        return [row.type_name for row in self._table.rows]

    @property
    def in_sizes(self) -> list[Any]:
        return self._table.in_sizes

    @property
    def out_sizes(self) -> list[Any]:
        return self._table.out_sizes

    @property
    def param_nums(self) -> list[int]:
        return [row.params for row in self._table.rows]

    @property
    def training_modes(self) -> list[bool]:
        return [row.training for row in self._table.rows]

    @property
    def total_training_modes(self) -> dict[str, int]:
        # read from the model when asked, as Lightning's (a layer put in eval mode after summarizing counts)
        modes = [layer.training for layer in self._model.modules()][1:]  # the root module left out
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_parameters(self) -> int:
        return self._table.total

    @property
    def trainable_parameters(self) -> int:
        return self._table.trainable

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        return self._table.size_mb

    @property
    def total_flops(self) -> int:
        return self._table.total_flops

    def __getattr__(self, name: str) -> Any:
        # trainmesh's table underneath (rows, total, trainable, size_mb, ...): what trainmesh's own
        # summarize gave before it returned Lightning's object
        if name.startswith("__") or name == "_table":
            raise AttributeError(name)
        return getattr(self._table, name)

    def __str__(self) -> str:
        reread_size_columns(self._table, self._model)  # Lightning's __str__ reads the example again
        return str(self._table)

    def __repr__(self) -> str:
        return str(self)


# Lightning's table of bits per parameter for the size column; a mixed precision is not in it
_SIZED_PRECISIONS = ("64", "32", "16", "bf16", "16-true", "bf16-true", "32-true", "64-true")


def warn_of_an_unsized_precision(model: Any) -> None:
    """Lightning's warning as its summary is made for a module attached to a Trainer whose precision is
    mixed ("16-mixed", "bf16-mixed"): the size column counts 32 bits then (trainmesh's counts the
    parameters' own bytes, the same 4 where the parameters stay float32 under autocast)."""
    trainer = getattr(model, "_trainer", None)
    precision = getattr(trainer, "precision", None) if trainer is not None else None
    if precision is not None and precision not in _SIZED_PRECISIONS:
        rank_zero_warn(
            f"Precision {precision} is not supported by the model summary. "
            " Estimated model size in MB will not be accurate. Using 32 bits instead.",
            category=UserWarning,
        )


def summarize(lightning_module: torch.nn.Module, max_depth: int = 1) -> ModelSummary:
    """Lightning's ``summarize``: the :class:`ModelSummary` of ``lightning_module`` down to ``max_depth``.

    Args:
        lightning_module: the module.
        max_depth: 1 lists its children, -1 every layer, 0 only the totals.

    Examples:
        >>> summary = summarize(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)))
        >>> [row.params for row in summary.rows], summary.total_parameters
        ([8320, 1290], 9610)
    """
    return ModelSummary(lightning_module, max_depth=max_depth)
