"""Lightning's ``lightning.pytorch.utilities.model_summary.model_summary_deepspeed``: the summary of a
DeepSpeed-partitioned model, refused (trainmesh has no DeepSpeed strategy: use ModelSummary)."""

from trainmesh.utilities.refusal import refused_class

_WHY = "trainmesh has no DeepSpeed strategy, so no DeepSpeed-partitioned model to summarize; use ModelSummary"
DeepSpeedSummary = refused_class("DeepSpeedSummary", _WHY, module=__name__)
DeepSpeedLayerSummary = refused_class("DeepSpeedLayerSummary", _WHY, module=__name__)
deepspeed_param_size = refused_class("deepspeed_param_size", _WHY, module=__name__)

__all__ = ["DeepSpeedLayerSummary", "DeepSpeedSummary", "deepspeed_param_size"]
