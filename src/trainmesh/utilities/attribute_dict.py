from __future__ import annotations

from typing import Any


class AttributeDict(dict):
    """A dict whose keys read as attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as err:
            raise AttributeError(f"hyperparameter {key!r} was not saved; saved: {sorted(self)}") from err

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value
