"""Lightning's ``lightning.pytorch.core.mixins.hparams_mixin`` import path of ``HyperparametersMixin``."""

from trainmesh.hyperparameters import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
