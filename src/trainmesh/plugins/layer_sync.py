"""Lightning's layer-sync plugins: ``Trainer(sync_batchnorm=True)`` (or ``plugins=[TorchSyncBatchNorm()]``)
turns every batch-norm layer into torch's ``SyncBatchNorm`` for fit, so that the statistics are those
of the global batch across processes, and back when fit ends.

torch's ``SyncBatchNorm`` runs on GPUs only (its forward raises for a CPU tensor), so the Trainer
refuses it before training where processes on CPU would sync.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LayerSync:
    """Wraps layers of a model with synchronisation across processes (``apply``) and undoes it (``revert``)."""

    def apply(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def revert(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError


class TorchSyncBatchNorm(LayerSync):
    """Every ``BatchNorm*d`` as ``torch.nn.SyncBatchNorm`` over the whole world (Lightning's plugin, its code)."""

    def apply(self, model: nn.Module) -> nn.Module:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)

    def revert(self, model: nn.Module) -> nn.Module:
        converted = model
        if isinstance(model, nn.SyncBatchNorm):
            # SyncBatchNorm keeps no record of the original class: a batch norm of any dimension.
            converted = _BatchNormXd(
                model.num_features, model.eps, model.momentum, model.affine, model.track_running_stats
            )
            if model.affine:
                with torch.no_grad():
                    converted.weight = model.weight
                    converted.bias = model.bias
            converted.running_mean = model.running_mean
            converted.running_var = model.running_var
            converted.num_batches_tracked = model.num_batches_tracked
        for name, child in model.named_children():
            converted.add_module(name, self.revert(child))
        return converted


class _BatchNormXd(nn.modules.batchnorm._BatchNorm):
    def _check_input_dim(self, input: Tensor) -> None:
        return  # BatchNorm1d/2d/3d differ only in this check


# Lightning 1.x's name of the same plugin.
NativeSyncBatchNorm = TorchSyncBatchNorm
