"""``RichModelSummary``'s printout: Lightning's rich table of the layers, then its grid of totals, on
rich's console (Lightning 2.6's ``RichModelSummary.summarize``, drawn from trainmesh's summary table)."""

from __future__ import annotations

from typing import Any

from trainmesh.seed import import_leaving_rng
from trainmesh.utilities.model_summary.table import SummaryTable, human_readable_count, summary_columns


def print_rich_summary(summary: SummaryTable, **summarize_kwargs: Any) -> None:
    """Print ``summary`` as Lightning's ``RichModelSummary`` does (``header_style``, as Lightning's,
    is the one styling argument read)."""
    # rich draws from Python's random on its first import: imported leaving the user's seeded state
    rich = import_leaving_rng("rich")
    table_module = import_leaving_rng("rich.table")
    console = rich.get_console()
    columns = summary_columns(summary)
    names = [name for name, _ in columns]
    table = table_module.Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
    table.add_column(" ", style="dim")
    table.add_column("Name", justify="left", no_wrap=True)
    table.add_column("Type")
    table.add_column("Params", justify="right")
    table.add_column("Mode")
    table.add_column("FLOPs", justify="right")
    for name in ("In sizes", "Out sizes"):
        if name in names:
            table.add_column(name, justify="right", style="white")
    for row in zip(*(cells for _, cells in columns)):
        table.add_row(*row)
    console.print(table)

    counts = [summary.trainable, summary.non_trainable, summary.total]
    trainable, frozen, total = (f"{human_readable_count(int(count)):<10}" for count in counts)
    grid = table_module.Table.grid(expand=True)
    grid.add_column()
    grid.add_column()
    grid.add_row(f"[bold]Trainable params[/]: {trainable}")
    grid.add_row(f"[bold]Non-trainable params[/]: {frozen}")
    grid.add_row(f"[bold]Total params[/]: {total}")
    grid.add_row(f"[bold]Total estimated model params size (MB)[/]: {f'{summary.size_mb:,.3f}':<10}")
    grid.add_row(f"[bold]Modules in train mode[/]: {summary.train_modules}")
    grid.add_row(f"[bold]Modules in eval mode[/]: {summary.eval_modules}")
    grid.add_row(f"[bold]Total FLOPs[/]: {human_readable_count(summary.total_flops)}")
    console.print(grid)
