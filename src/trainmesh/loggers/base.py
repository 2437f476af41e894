"""The logger interface the Trainer feeds with metrics and hyperparameters."""

from __future__ import annotations

from typing import Any


class FabricLogger:
    """What Lightning Fabric's ``log``/``log_dict`` feed (``lightning.fabric.loggers.Logger``).

    The Trainer's :class:`Logger` builds on it, as Lightning's does; Fabric's own loggers build on
    this one alone, so that they are no Trainer loggers (a LightningCLI's ``--trainer.logger
    CSVLogger`` names one class, as Lightning's).
    """

    @property
    def name(self) -> str | None:
        raise NotImplementedError

    @property
    def version(self) -> int | str | None:
        raise NotImplementedError

    @property
    def root_dir(self) -> str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        return None

    @property
    def group_separator(self) -> str:
        return "/"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        raise NotImplementedError

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's graph; most loggers record none."""

    def save(self) -> None:
        """Flush what is buffered to disk."""

    def finalize(self, status: str) -> None:
        """Called once when the run ends; ``status`` is "success", "failed" or "interrupted"."""
        self.save()


class Logger(FabricLogger):
    """Receives metrics (reduced across ranks where logged with ``sync_dist``) on global rank 0 only.

    ``log_dir`` is where this logger writes; the Trainer puts checkpoints next to it.
    """

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def version(self) -> int | str:
        raise NotImplementedError

    @property
    def log_dir(self) -> str | None:
        """Where this version writes; None (Lightning's default) for a logger that writes no files here:
        the Trainer then uses ``<save_dir or default_root_dir>/<name>/<version>``, where Lightning's
        ModelCheckpoint puts its folder."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The root folder of this logger's runs, or None (Lightning's default)."""
        return None

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def agree_on_version(self, broadcast: Any) -> None:
        """Make every process use rank 0's version (its folder), via ``broadcast(obj)``.

        Each process would otherwise pick the next free version on its own, and a later one
        could see rank 0's new folder and pick another.
        """
        if hasattr(self, "_version"):
            self._version = broadcast(self.version)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        raise NotImplementedError

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's graph (the Trainer calls it at the start of fit); most loggers
        record none."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after ModelCheckpoint writes a checkpoint (Lightning's hook; a weak proxy of the
        callback): a logger that records checkpoints overrides it. Nothing here."""

    def save(self) -> None:
        """Flush what is buffered to disk."""

    def finalize(self, status: str) -> None:
        """Called once when the run ends; ``status`` is "success", "failed" or "interrupted"."""
        self.save()


class DummyExperiment:
    """What ``logger.experiment`` is on ranks other than global rank 0: every call does nothing.

    A Module runs on every rank, so ``self.logger.experiment.add_image(...)`` in a hook runs on
    every rank too; only rank 0 may write, or each process would write its own event file into
    the same folder. As in Lightning, the other ranks get this stand-in instead of a writer.

    >>> DummyExperiment().add_image("samples", None, 3) is None
    True
    """

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return self.nop

    def __getitem__(self, index: Any) -> DummyExperiment:
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        """Item assignment is taken and dropped too (Lightning's DummyExperiment)."""


def on_rank_zero() -> bool:
    """Whether this process is global rank 0 (the launchers' RANK variable, as rank_zero_only reads it)."""
    from trainmesh.utilities.rank_zero import global_rank_from_env

    return global_rank_from_env() == 0
