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

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def save(self) -> None:
        """Flush what is buffered to disk."""

    def finalize(self, status: str) -> None:
        """Called once when the run ends; ``status`` is "success", "failed" or "interrupted"."""
        self.save()
