"""Lightning 2.6's ``tuner``: ``Tuner(trainer).lr_find(model, ...)``, the learning-rate range test.

>>> from trainmesh.tuner import Tuner
"""

from trainmesh.tuner.tuning import Tuner

__all__ = ["Tuner"]
