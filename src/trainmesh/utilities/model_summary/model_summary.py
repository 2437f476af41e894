"""Lightning's ``lightning.pytorch.utilities.model_summary.model_summary`` path, for a program that
imports from it (the package's names)."""

from trainmesh.utilities.model_summary.lightning_summary import (
    LayerSummary,
    ModelSummary,
    get_formatted_model_size,
    get_human_readable_count,
    parse_batch_shape,
    summarize,
)

__all__ = [
    "LayerSummary",
    "ModelSummary",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]
