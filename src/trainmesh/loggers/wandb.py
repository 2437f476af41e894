"""``WandbLogger``: metrics and the config into a Weights & Biases run, as Lightning's logger logs
them (each row with ``trainer/global_step``, the step metric every key is plotted against). Needs
the ``wandb`` package; ``offline=True`` (or ``WANDB_MODE=offline``) writes the run under
``save_dir/wandb`` without a server, to ``wandb sync`` later.

>>> # trainer = Trainer(logger=WandbLogger(project="mnist", offline=True, save_dir="runs"))
"""

from __future__ import annotations

import importlib.util
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from trainmesh.loggers.base import DummyExperiment, Logger, on_rank_zero
from trainmesh.loggers.params import add_prefix, json_serializable, sanitize_callables
from trainmesh.utilities.rank_zero import rank_zero_warn


class WandbLogger(Logger):
    """Lightning's ``WandbLogger`` (its arguments; extra keyword arguments go to ``wandb.init``).
    ``log_model`` (checkpoints as W&B artifacts) is not supported yet and is refused, so
    ``add_file_policy`` (how such an upload copies the file) is kept and has nothing to act on."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Any = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: str = "mutable",
        **kwargs: Any,
    ) -> None:
        if importlib.util.find_spec("wandb") is None:
            raise ModuleNotFoundError(
                "Requirement 'wandb>=0.12.10' not met. HINT: Try running `pip install -U 'wandb>=0.12.10'`"
            )
        if offline and log_model:
            raise ValueError(
                f"Providing log_model={log_model} and offline={offline} is an invalid configuration"
                " since model checkpoints cannot be uploaded in offline mode.\n"
                "Hint: Set `offline=False` to log your model."
            )
        if log_model:
            raise ValueError(
                f"WandbLogger(log_model={log_model!r}): logging checkpoints as W&B artifacts is not supported by "
                "trainmesh yet; leave log_model out (checkpoints are written by ModelCheckpoint as usual)"
            )
        self._offline, self._prefix, self._experiment = offline, prefix, experiment
        # How Lightning adds a checkpoint to its artifact; only log_model uploads one, refused above.
        self.add_file_policy = add_file_policy
        folder = save_dir if save_dir is not None else dir
        self._wandb_init: dict[str, Any] = {
            "name": name,
            "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": os.fspath(folder) if folder is not None else None,
            "id": version or id,
            "resume": "allow",
            "anonymous": "allow" if anonymous else None,
            **kwargs,
        }
        self._project, self._save_dir = self._wandb_init["project"], self._wandb_init["dir"]
        self._name, self._id = self._wandb_init["name"], self._wandb_init["id"]

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (on global rank 0; elsewhere a stand-in that does nothing)."""
        if not on_rank_zero():
            return DummyExperiment()
        if self._experiment is None:
            import wandb

            settings = {"mode": "offline"} if self._offline else {}
            if wandb.run is not None:
                rank_zero_warn(
                    "There is a wandb run already in progress and newly created instances of `WandbLogger` will reuse"
                    " this run. If this is not desired, call `wandb.finish()` before instantiating `WandbLogger`."
                )
                self._experiment = wandb.run
            else:
                self._experiment = wandb.init(**{**settings, **self._wandb_init})
                # Every metric is plotted against the Trainer's step, logged with it (Lightning's).
                self._experiment.define_metric("trainer/global_step")
                self._experiment.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return self._experiment

    def watch(self, model: Any, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    @property
    def name(self) -> str:
        """The project (not the run's display name: ``logger.experiment.name``)."""
        return str(self._project)

    @property
    def version(self) -> str:
        return str(self._experiment.id if self._experiment is not None else self._id)

    @property
    def save_dir(self) -> str | None:
        return self._save_dir

    @property
    def log_dir(self) -> str:
        """Where checkpoints go: ``<save_dir>/<project>/<run id>``, as Lightning's ModelCheckpoint puts them."""
        return os.path.join(self._save_dir or os.getcwd(), self.name, str(self.experiment.id))

    def agree_on_version(self, broadcast: Any) -> None:
        """Every process names rank 0's run (only rank 0 starts it)."""
        run_id = broadcast(self.experiment.id if on_rank_zero() else None)
        if not on_rank_zero():
            self._id = run_id

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        if not on_rank_zero():  # the Trainer calls each logger on every rank, as Lightning's
            return
        params = vars(params) if isinstance(params, Namespace) else dict(params or {})
        self.experiment.config.update(json_serializable(sanitize_callables(params)), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not on_rank_zero():
            return
        metrics = add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        if step is not None and not self._wandb_init.get("sync_tensorboard"):
            self.experiment.log({**metrics, "trainer/global_step": step})
        else:
            self.experiment.log(metrics)

    def finalize(self, status: str) -> None:
        """Nothing to close: the run stays open, as Lightning leaves it (``wandb.finish()`` ends it)."""
