"""Lightning's ``lightning.pytorch.utilities.model_registry``: models kept on Lightning AI's hosted
registry. Refused: it needs that service (and a network); pass a local checkpoint path instead."""

from trainmesh.utilities.refusal import refused_class

_WHY = (
    "Lightning AI's hosted model registry is not supported by trainmesh (no service, no network); "
    "pass a local checkpoint file to ckpt_path= or load_from_checkpoint"
)
download_model_from_registry = refused_class("download_model_from_registry", _WHY, module=__name__)
find_model_local_ckpt_path = refused_class("find_model_local_ckpt_path", _WHY, module=__name__)

__all__ = ["download_model_from_registry", "find_model_local_ckpt_path"]
