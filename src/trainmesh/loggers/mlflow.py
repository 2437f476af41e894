"""``MLFlowLogger``: metrics and hyperparameters into an MLflow run, as Lightning's logger writes
them (the same experiment, run, metric keys, steps and values; ``tests/loggers/test_mlflow_wandb.py``
reads both back through mlflow's client). Needs the ``mlflow`` (or ``mlflow-skinny``) package; a
local store is ``tracking_uri="file:./mlruns"`` (the default, from ``save_dir``) or sqlite.

>>> # trainer = Trainer(logger=MLFlowLogger(experiment_name="mnist", save_dir="./mlruns"))
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from trainmesh.loggers.base import DummyExperiment, Logger, on_rank_zero
from trainmesh.loggers.params import add_prefix, flatten_params
from trainmesh.utilities.rank_zero import rank_zero_warn

LOCAL_FILE_URI_PREFIX = "file:"


class MLFlowLogger(Logger):
    """Lightning's ``MLFlowLogger`` (its arguments; ``log_model`` is not supported yet and is refused)."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = os.getenv("MLFLOW_TRACKING_URI"),
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Any = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        if importlib.util.find_spec("mlflow") is None:
            raise ModuleNotFoundError(
                "Requirement 'mlflow>=1.0.0' not met. HINT: Try running `pip install -U 'mlflow>=1.0.0'`"
            )
        if log_model:
            raise ValueError(
                f"MLFlowLogger(log_model={log_model!r}): logging checkpoints as MLflow artifacts is not supported by "
                "trainmesh yet; leave log_model out (checkpoints are written by ModelCheckpoint as usual)"
            )
        self._tracking_uri = tracking_uri or f"{LOCAL_FILE_URI_PREFIX}{save_dir}"
        self._experiment_name, self._run_name, self._run_id = experiment_name, run_name, run_id
        self._experiment_id: str | None = None
        self.tags = tags
        self._prefix, self._artifact_location = prefix, artifact_location
        self._log_batch_kwargs = {} if synchronous is None else {"synchronous": synchronous}
        self._initialized = False
        from mlflow.tracking import MlflowClient

        self._mlflow_client = MlflowClient(self._tracking_uri)

    @property
    def experiment(self) -> Any:
        """mlflow's ``MlflowClient`` (on global rank 0; elsewhere a stand-in that does nothing)."""
        if not on_rank_zero():
            return DummyExperiment()
        if not self._initialized:
            self._start_run()
        return self._mlflow_client

    def _start_run(self) -> None:
        import mlflow

        mlflow.set_tracking_uri(self._tracking_uri)
        client = self._mlflow_client
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
            self._initialized = True
            return
        if self._experiment_id is None:
            found = client.get_experiment_by_name(self._experiment_name)
            if found is not None and found.lifecycle_stage != "deleted":
                self._experiment_id = found.experiment_id
            else:
                self._experiment_id = client.create_experiment(
                    name=self._experiment_name, artifact_location=self._artifact_location
                )
        if self._run_name is not None:
            from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

            self.tags = {**(self.tags or {}), MLFLOW_RUN_NAME: self._run_name}
        from mlflow.tracking.context.registry import resolve_tags

        self._run_id = client.create_run(experiment_id=self._experiment_id, tags=resolve_tags(self.tags)).info.run_id
        self._initialized = True

    @property
    def run_id(self) -> str | None:
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str:
        return str(self.experiment_id)

    @property
    def version(self) -> str:
        return str(self.run_id)

    @property
    def save_dir(self) -> str | None:
        """The local store's folder (a ``file:`` tracking URI); None for a server."""
        if self._tracking_uri.startswith(LOCAL_FILE_URI_PREFIX):
            return self._tracking_uri[len(LOCAL_FILE_URI_PREFIX) :]
        return None

    @property
    def log_dir(self) -> str:
        """Where checkpoints go: ``<save_dir>/<experiment id>/<run id>``, as Lightning's ModelCheckpoint puts them."""
        return os.path.join(self.save_dir or os.getcwd(), self.name, self.version)

    def agree_on_version(self, broadcast: Any) -> None:
        """Every process uses rank 0's experiment and run (only rank 0 creates them)."""
        ids = broadcast((self.experiment_id, self.run_id) if on_rank_zero() else None)  # rank 0 creates them
        if not on_rank_zero():
            self._experiment_id, self._run_id = ids

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        if not on_rank_zero():  # the Trainer calls each logger on every rank, as Lightning's
            return
        from mlflow.entities import Param

        flat = flatten_params(params)
        # MLflow takes at most 100 parameters per call, each value cut to 250 characters (Lightning's).
        entries = [Param(key=k, value=str(v)[:250]) for k, v in flat.items()]
        for start in range(0, len(entries), 100):
            self.experiment.log_batch(run_id=self.run_id, params=entries[start : start + 100], **self._log_batch_kwargs)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not on_rank_zero():
            return
        from mlflow.entities import Metric

        timestamp_ms = int(time.time() * 1000)
        entries = []
        for key, value in add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                continue  # MLflow metrics are numbers (Lightning discards strings too)
            clean = re.sub("[^a-zA-Z0-9_/. -]+", "", key)
            if clean != key:
                rank_zero_warn(
                    "MLFlow only allows '_', '/', '.' and ' ' special characters in metric name."
                    f" Replacing {key} with {clean}.",
                    category=RuntimeWarning,
                )
            entries.append(Metric(key=clean, value=float(value), timestamp=timestamp_ms, step=step or 0))
        self.experiment.log_batch(run_id=self.run_id, metrics=entries, **self._log_batch_kwargs)

    def finalize(self, status: str = "success") -> None:
        if not self._initialized or not on_rank_zero():
            return
        status = {"success": "FINISHED", "failed": "FAILED", "finished": "FINISHED"}.get(status, status)
        if self.experiment.get_run(self.run_id):
            self.experiment.set_terminated(self.run_id, status)
