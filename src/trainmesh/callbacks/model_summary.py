"""A table of a model's layers and parameter counts, printed when fit starts (the table itself:
``trainmesh.utilities.model_summary``, as Lightning's)."""

from __future__ import annotations

import importlib.util
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.model_summary import ModelSummary as Summary  # Lightning's module imports it so
from trainmesh.utilities.model_summary import (
    SummaryRow,
    SummaryTable,
    format_summary,
    human_readable_count,
    summarize,
)
from trainmesh.utilities.model_summary.lightning_summary import warn_of_an_unsized_precision
from trainmesh.utilities.model_summary.table import reread_size_columns
from trainmesh.utilities.model_summary.table import summarize as summary_table

__all__ = [
    "ModelSummary",
    "RichModelSummary",
    "Summary",
    "SummaryRow",
    "SummaryTable",
    "format_summary",
    "human_readable_count",
    "summarize",
]

log = lightning_named_logger(__name__)


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
        if self.max_depth == 0:
            return
        # On every rank, as Lightning's: the example's forward moves each rank's generators alike.
        warn_of_an_unsized_precision(pl_module)  # as Lightning's summary object warns when it is made
        table = summary_table(pl_module, self.max_depth)
        reread_size_columns(table, pl_module)
        if getattr(trainer, "is_global_zero", True):
            self._show(table)

    def _show(self, table: SummaryTable) -> None:
        # Lightning's ModelSummary logs the table (stderr; silenced with Lightning's loggers)
        log.info("\n" + format_summary(table))


class RichModelSummary(ModelSummary):
    """Lightning's rich summary, the Trainer's default where rich is installed (as Lightning's): the
    same table drawn as Lightning's rich table with its grid of totals on rich's console (stdout),
    and replaces the default summary as ``ModelSummary`` does.

    Args:
        max_depth: the depth of submodules listed (0 turns the printout off) (default ``1``).
        **summarize_kwargs: Lightning's styling arguments (``header_style`` is read, as Lightning's).

    Examples:
        >>> isinstance(RichModelSummary(max_depth=2), ModelSummary)
        True
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if importlib.util.find_spec("rich") is None:  # as Lightning's, when it is made (not once fit starts)
            raise ModuleNotFoundError(
                "`RichModelSummary` requires `rich` to be installed. Install it by running `pip install -U rich`."
            )
        super().__init__(max_depth, **summarize_kwargs)

    def _show(self, table: SummaryTable) -> None:
        from trainmesh.callbacks.rich_summary import print_rich_summary  # rich only where this summary prints

        print_rich_summary(table, **self.summarize_kwargs)
