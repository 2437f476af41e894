"""Lightning's ``lightning.pytorch.core.mixins`` import path: ``HyperparametersMixin``, which gives
any class ``save_hyperparameters()`` and ``hparams`` (a data module's base class has it).

>>> from trainmesh.core.mixins import HyperparametersMixin
>>> class Config(HyperparametersMixin):
...     def __init__(self, lr=0.1):
...         super().__init__()
...         self.save_hyperparameters()
>>> Config().hparams
"lr": 0.1
"""

from trainmesh.hyperparameters import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
