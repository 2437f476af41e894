"""Lightning's model summary table (``lightning.pytorch.utilities.model_summary``): a module's layers
with their parameter counts, training modes and FLOPs and, where the module has an
``example_input_array``, the sizes each layer took and gave in one forward of it; printed as
Lightning 2.6 prints it (tests/callbacks/test_model_summary_as_lightning.py)."""

from trainmesh.utilities.model_summary.lightning_summary import (
    LayerSummary,
    ModelSummary,
    get_formatted_model_size,
    get_human_readable_count,
    parse_batch_shape,
    summarize,
)
from trainmesh.utilities.model_summary.model_summary_deepspeed import DeepSpeedSummary
from trainmesh.utilities.model_summary.table import (
    SummaryRow,
    SummaryTable,
    format_summary,
    human_readable_count,
)

__all__ = [
    "DeepSpeedSummary",
    "LayerSummary",
    "ModelSummary",
    "SummaryRow",
    "SummaryTable",
    "format_summary",
    "get_formatted_model_size",
    "get_human_readable_count",
    "human_readable_count",
    "parse_batch_shape",
    "summarize",
]
