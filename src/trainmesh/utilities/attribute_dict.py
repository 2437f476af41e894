from __future__ import annotations

from typing import Any


class AttributeDict(dict):
    """A dict whose keys read as attributes: ``hparams.lr`` is ``hparams["lr"]``; printed as
    Lightning's (one ``"key": value`` row per key, sorted, aligned; nothing when empty).

    >>> hparams = AttributeDict(lr=0.1, batch_size=32)
    >>> hparams.lr
    0.1
    >>> hparams
    "batch_size": 32
    "lr":         0.1
    """

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as err:
            # Lightning's words first (a program may match them), then which hyperparameters were saved
            # (keys may mix str and int: sorted by their text)
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{key}' (hyperparameter {key!r} was not saved; "
                f"saved: {sorted(self, key=str)})"
            ) from err

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)  # Lightning's error type
        del self[key]

    def __repr__(self) -> str:
        # Lightning's layout, so that a printed hparams reads the same under either
        if not self:
            return ""
        width = max(len(str(key)) for key in self) + 3
        labels = {key: f'"{key}":' for key in self}
        return "\n".join(f"{labels[key]:{width}s} {self[key]}" for key in sorted(self.keys()))
