"""Lightning's ``lightning.pytorch.overrides.distributed``: the samplers its Trainer gives predict
loaders under ddp, and its DDP backward hook. Refused: trainmesh's Trainer shards every loader itself
(predict unpadded, each sample once, as Lightning's), and its DDP is torch's own."""

from trainmesh.utilities.refusal import refused_class

__all__ = ["UnrepeatedDistributedSampler", "UnrepeatedDistributedSamplerWrapper", "prepare_for_backward"]

_SAMPLER = (
    "the sampler Lightning's Trainer gives each predict loader under ddp itself; trainmesh's Trainer does the "
    "same (each sample read once, each rank returning its own predictions): pass a plain DataLoader"
)
UnrepeatedDistributedSampler = refused_class("UnrepeatedDistributedSampler", _SAMPLER, module=__name__)
UnrepeatedDistributedSamplerWrapper = refused_class("UnrepeatedDistributedSamplerWrapper", _SAMPLER, module=__name__)
prepare_for_backward = refused_class(
    "prepare_for_backward",
    "Lightning's hook into DistributedDataParallel's reducer for its own loop; trainmesh runs torch's DDP as it is "
    "(strategy='ddp'), so there is no reducer to prepare",
    module=__name__,
)
