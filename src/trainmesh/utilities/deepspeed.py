"""Lightning's ``utilities.deepspeed`` names: trainmesh has no DeepSpeed strategy, so a DeepSpeed
ZeRO checkpoint is never written here; each name is refused with the reason and what to use."""

from __future__ import annotations

from trainmesh.utilities.refusal import refused_class

_WHY = (
    "trainmesh has no DeepSpeed strategy, so it writes no DeepSpeed ZeRO checkpoint; a sharded "
    "(fsdp) checkpoint is turned into full weights with trainer.full_state_dict() or "
    "`trainmesh checkpoint consolidate`"
)

convert_zero_checkpoint_to_fp32_state_dict = refused_class(
    "convert_zero_checkpoint_to_fp32_state_dict", _WHY, module=__name__
)
ds_checkpoint_dir = refused_class("ds_checkpoint_dir", _WHY, module=__name__)

__all__ = ["convert_zero_checkpoint_to_fp32_state_dict", "ds_checkpoint_dir"]
