"""The table ``trainer.validate`` / ``trainer.test`` print, as Lightning 2.6 prints it (its
``_EvaluationLoop._print_results``, rich's branch: rich is one of trainmesh's dependencies)."""

from __future__ import annotations

import shutil
from typing import Any

from trainmesh.seed import import_leaving_rng


def print_results(stage: str, results: list[dict[str, Any]]) -> None:
    """One column per dataloader ("DataLoader 0", ...), one row per metric name (sorted; the
    "/dataloader_idx_N" suffix removed), each value as Python prints it, titled "Test metric" /
    "Validate metric"; wide tables split by the terminal's width, as Lightning's."""
    results = [{k.split("/dataloader_idx_")[0]: v for k, v in result.items()} for result in results]
    names = sorted({name for result in results for name in result})
    if not names:
        return
    import_leaving_rng("rich.console")  # its first import draws from Python's random
    from rich import get_console
    from rich.table import Column, Table

    headers = [f"DataLoader {i}" for i in range(len(results))]
    term_size = shutil.get_terminal_size(fallback=(120, 30)).columns or 120
    max_length = int(min(max(len(max(names, key=len)), len(max(headers, key=len)), 25), term_size / 2))
    rows = [[_shown(result[name]) if name in result else " " for result in results] for name in names]
    num_cols = int((term_size - max_length) / max_length)
    for i in range(0, len(headers), num_cols):
        table_headers = [f"{stage} Metric".capitalize(), *headers[i : i + num_cols]]
        columns = [Column(h, justify="center", style="magenta", width=max_length) for h in table_headers]
        columns[0].style = "cyan"
        table = Table(*columns)
        for name, row in zip(names, rows):
            table.add_row(name, *row[i : i + num_cols])
        get_console().print(table)


def _shown(value: Any) -> str:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    return f"{value}"
