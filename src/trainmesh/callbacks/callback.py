"""Lightning's ``lightning.pytorch.callbacks.callback`` import path (``from lightning.pytorch.callbacks.callback
import Callback``, as Lightning's own tests and callbacks import it): trainmesh's ``Callback``."""

from trainmesh.callbacks.base import Callback

__all__ = ["Callback"]
