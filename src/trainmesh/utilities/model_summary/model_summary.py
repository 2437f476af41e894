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
from trainmesh.utilities.model_summary.table import LEFTOVER_PARAMS_NAME, NOT_APPLICABLE, UNKNOWN_SIZE

# Lightning's module constants: its tests (and a program) compare a summary's sizes with UNKNOWN_SIZE

__all__ = [
    "LEFTOVER_PARAMS_NAME",
    "NOT_APPLICABLE",
    "UNKNOWN_SIZE",
    "LayerSummary",
    "ModelSummary",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]
