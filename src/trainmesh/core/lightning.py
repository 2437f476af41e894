"""pytorch-lightning 1.x's ``pytorch_lightning.core.lightning`` (deprecated in 1.7, removed in 1.9): 1.9.5
still imports it, and stops at the module's construction with what to import instead; trainmesh does the same,
so a 1.x program that imports ``LightningModule`` from there stops with 1.9.5's error and hint, not an
``ImportError`` (Lightning 2.x has no such module).

>>> from trainmesh.core.lightning import LightningModule
>>> try:
...     LightningModule()
... except NotImplementedError as error:
...     print(str(error)[:62])
Importing `pytorch_lightning.core.lightning.LightningModule` w
"""

from __future__ import annotations

from typing import Any

__all__ = ["LightningModule"]


class LightningModule:
    """1.9.5's stand-in: any construction (a subclass's ``super().__init__()``) raises its error."""

    def __init__(self, *_: Any, **__: Any) -> None:
        # 1.9.5's words (pytorch_lightning/_graveyard/core.py), naming the package the program imports
        raise NotImplementedError(
            "Importing `pytorch_lightning.core.lightning.LightningModule` was deprecated in v1.7.0 and removed as of"
            " v1.9.0. Please use `from pytorch_lightning import LightningModule` instead"
        )
