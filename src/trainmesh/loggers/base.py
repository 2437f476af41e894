"""The logger interface the Trainer feeds with metrics and hyperparameters."""

from __future__ import annotations

from typing import Any


class Logger:
    """Receives metrics (already reduced across ranks) on global rank 0 only.

    ``log_dir`` is where this logger writes; the Trainer puts checkpoints next to it.
    """

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def version(self) -> int | str:
        raise NotImplementedError

    @property
    def log_dir(self) -> str:
        raise NotImplementedError

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def agree_on_version(self, broadcast: Any) -> None:
        """Make every process use rank 0's version (its folder), via ``broadcast(obj)``.

        Each process would otherwise pick the next free version on its own, and a later one
        could see rank 0's new folder and pick another.
        """
        if hasattr(self, "_version"):
            self._version = broadcast(self.version)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def save(self) -> None:
        """Flush what is buffered to disk."""

    def finalize(self, status: str) -> None:
        """Called once when the run ends; ``status`` is "success", "failed" or "interrupted"."""
        self.save()
