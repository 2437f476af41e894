"""Save checkpoints during fit: on a step or epoch cadence, keeping the best k by a metric.

Every decision here (whether to save, which file drops out of the top k) is made
from values that are identical on every rank: ``callback_metrics`` after the epoch-end
reduction, the step and epoch counters, rank 0's answer to whether a file exists, and whether a value
enters a full top k, decided by every rank together (a metric logged without ``sync_dist``
differs by rank: each rank keeps its own scores, as in Lightning). That matters
because ``trainer.save_checkpoint`` is collective: a rank that skipped a save another rank made
would hang the run. Each rank names the file from its own metrics (its ``best_model_path`` is
its own name, as Lightning's); the file written is the one rank 0 names.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any, Literal

import torch

from trainmesh.callbacks.checkpoint import Checkpoint
from trainmesh.callbacks.checkpoint_last import last_due, save_last
from trainmesh.callbacks.checkpoint_loggers import tell_loggers_of_save
from trainmesh.callbacks.checkpoint_manual import save_manual_step
from trainmesh.callbacks.checkpoint_names import (
    absolute,
    as_score,
    check_arguments,
    default_checkpoint_dir,
    monitor_candidates,
    render_filename,
    saves_at_epoch_end,
    warn_if_dir_not_empty,
    worst,
    write_yaml,
)
from trainmesh.callbacks.checkpoint_removal import remove_if_ours
from trainmesh.callbacks.checkpoint_state import restore_state, saved_state
from trainmesh.callbacks.checkpoint_top_k import monitor_available, save_if_top_k, save_latest
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities import docstrings
from trainmesh.utilities.filesystem import local_path
from trainmesh.utilities.rank_zero import rank_zero_info

__all__ = ["ModelCheckpoint", "render_filename"]


class ModelCheckpoint(Checkpoint):
    __doc__ = docstrings.MODEL_CHECKPOINT  # Args and Examples, kept with the other long docstrings

    # Lightning's class attributes, which programs set to change every name (on the class or an instance).
    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: Literal[True, False, "link"] | None = None,  # Lightning 2.6's type: a CLI parses it as Lightning's
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        check_arguments(monitor, mode, save_top_k, every_n_train_steps, every_n_epochs, train_time_interval)
        dirpath = local_path(dirpath, "ModelCheckpoint(dirpath)")
        # Lightning's: a folder given is made absolute, its links resolved (realpath); one of the run's
        # (setup) stays as the trainer's folders give it, relative where they are
        self.dirpath: str | None = os.path.realpath(absolute(dirpath)) if dirpath is not None else None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        if isinstance(save_last, str) and save_last != "link":
            raise ValueError(f"ModelCheckpoint(save_last={save_last!r}): use True, False or 'link'")
        # None stays None, as Lightning's (its default callback's save_last reads None)
        self.save_last: bool | str | None = save_last if save_last is None or save_last == "link" else bool(save_last)
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs = 1
        self.save_on_exception = save_on_exception
        self.train_time_interval = train_time_interval
        self._last_time_checked: float | None = None  # time.monotonic() at the last time-due save
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = every_n_epochs or 0
        # None: decided at each save point, as Lightning decides (_saves_at_epoch_end).
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.save_weights_only = save_weights_only
        self.enable_version_counter = enable_version_counter
        self.verbose = verbose
        self.auto_insert_metric_name = auto_insert_metric_name

        self.best_model_path = ""
        self._best_score: torch.Tensor | None = None
        # Scores are the logged tensors themselves (their dtype and device), as Lightning keeps them
        # (users call .item() on them); ranking compares them as floats.
        self.current_score: torch.Tensor | None = None
        self.last_model_path = ""
        self.kth_best_model_path = ""
        self.kth_value = as_score(worst(mode))
        self.best_k_models: dict[str, torch.Tensor] = {}
        # Step 0 counts as saved: a checkpoint of untrained weights is never worth writing.
        self._last_global_step_saved = 0
        # The step and path of the newest file written: last.ckpt follows them (checkpoint_last.last_due).
        self._written_at_step: int | None = None
        self._last_checkpoint_saved = ""
        self._owned: set[str] = set()  # files this callback wrote (or restored as its own)
        self._validated_since_check = False
        self._validated_this_fit = False
        self._warned_missing = False
        self._deferred = False  # a step save waiting for the validation after the epoch's last batch

    @property
    def best_model_score(self) -> torch.Tensor | None:
        """The monitored value of the best checkpoint, as a 0-d tensor (None before one is ranked)."""
        return self._best_score

    @best_model_score.setter
    def best_model_score(self, value: float | torch.Tensor | None) -> None:
        self._best_score = None if value is None else as_score(value)

    @property
    def state_key(self) -> str:
        # Two checkpoint callbacks (say, best-by-loss and every-1000-steps) keep separate state.
        # Lightning 2.6's key, train_time_interval included (None too), so that its checkpoints and
        # trainmesh's file the state under the same name.
        return f"{type(self).__qualname__}{self._key_fields(with_interval=True)!r}"

    @property
    def _legacy_state_keys(self) -> tuple[str, ...]:
        """Keys this callback's state was saved under before: trainmesh's before lt36 and Lightning
        1.x's (no ``train_time_interval`` when it is None), then Lightning's bare class name."""
        older = () if self.train_time_interval is not None else (f"{type(self).__qualname__}{self._key_fields()!r}",)
        return (*older, type(self).__qualname__)

    def _key_fields(self, *, with_interval: bool = False) -> dict[str, object]:
        key: dict[str, object] = {
            "monitor": self.monitor,
            "mode": self.mode,
            "every_n_train_steps": self.every_n_train_steps,
            "every_n_epochs": self.every_n_epochs,
        }
        if with_interval:
            key["train_time_interval"] = self.train_time_interval
        return key

    # ---- hooks --------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        # Resolved once, as Lightning's ``__resolve_ckpt_dir`` (which returns ``self.dirpath`` once set): a
        # later fit or a second Trainer with another logger version keeps the folder of the first setup
        if self.dirpath is None:
            # Rank 0's answer wins: a logger may pick its version folder differently on each rank.
            self.dirpath = trainer.runtime.broadcast(default_checkpoint_dir(trainer), src=0)
        if trainer.is_global_zero and stage == "fit":
            warn_if_dir_not_empty(self.dirpath, self.save_top_k)

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._validated_since_check = self._validated_this_fit = False
        self._last_time_checked = time.monotonic()

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self._validated_since_check = self._validated_this_fit = True
        if self._deferred and not self._saves_at_epoch_end(trainer):  # a step save waited for this metric
            self._deferred = False
            if not self._skip(trainer):
                self._save(trainer, mid_epoch=True)
            return
        # After a validation that the epoch's end does not save for (save_on_train_epoch_end=False, or
        # validation runs more than once an epoch, or not every epoch): here, as Lightning's
        # on_validation_end saves; the one after the epoch's last batch too, before the epoch's
        # on_train_epoch_end and plateau scheduler step (the checkpoint holds the state before them).
        loop = trainer.loop
        in_fit = getattr(loop, "mid_epoch_validation", False) or getattr(loop, "epoch_end_validation", False)
        if in_fit and not self._skip(trainer):
            if not self._saves_at_epoch_end(trainer) and self._epoch_due(trainer):
                self._validated_since_check = False
                self._save(trainer, mid_epoch=False)

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._validated_since_check = False  # a validation before this batch was saved for, or not due
        if self._skip(trainer):
            return
        step_due = self.every_n_train_steps > 0 and trainer.global_step % self.every_n_train_steps == 0
        if not getattr(pl_module, "automatic_optimization", True):  # Lightning's own rules (checkpoint_manual)
            save = lambda: self._save(trainer, mid_epoch=True)  # noqa: E731
            self._deferred = (
                step_due and save_manual_step(self.monitor, self._monitor_candidates(trainer), trainer, pl_module, save)
            ) or self._deferred
            return
        step_due = self._time_due(trainer) or step_due  # always asked: every rank joins its broadcast
        if step_due and self._waits_for_validation(trainer):  # Lightning 2.6.6: saved at validation's end
            self._deferred = True
        elif step_due:
            self._save(trainer, mid_epoch=True)

    def _waits_for_validation(self, trainer: TrainerView) -> bool:
        """A monitored step save whose metric is not logged yet, or at the epoch's last batch with validation
        after it not saved for at the epoch's end: Lightning defers it to ``on_validation_end``."""
        if self.monitor is None or self.monitor not in self._monitor_candidates(trainer):
            return self.monitor is not None
        if self._saves_at_epoch_end(trainer) or not getattr(trainer, "is_last_batch", False):
            return False
        every = getattr(trainer, "check_val_every_n_epoch", 1)
        due = every is None or (trainer.current_epoch + 1) % every == 0
        return due and sum(trainer.num_val_batches) > 0

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        validated, self._validated_since_check = self._validated_since_check, False
        if self._skip(trainer) or not self._epoch_due(trainer):
            return
        if self._saves_at_epoch_end(trainer) or validated:
            self._save(trainer, mid_epoch=False)

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        """With ``save_last``, a fit that wrote no checkpoint (``save_top_k=0``, too short for the cadence) still
        leaves ``last.ckpt``, as Lightning 2.6's, under ``fast_dev_run`` too (measured). The Trainer's default,
        ``ModelCheckpoint()``, has no save_last: a fit that saved nothing (global_step 0) leaves no file."""
        if self.save_last and not self._last_checkpoint_saved:
            save_last(self, trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer: TrainerView, pl_module: Any, exception: BaseException) -> None:
        """``save_on_exception=True``: the checkpoint where the run stands, named as a save there
        would be (not ranked), and ``last.ckpt``, as Lightning's."""
        if not self.save_on_exception or self._skip(trainer):
            return
        metrics = self._monitor_candidates(trainer)
        path = self.format_checkpoint_name(metrics)
        self._last_global_step_saved = trainer.global_step
        self._write(trainer, path)
        if self.save_last:
            save_last(self, trainer, metrics)
        rank_zero_info(
            f"An {type(exception).__name__} was raised with message: {exception}, saved checkpoint to {path}"
        )

    def _monitor_candidates(self, trainer: TrainerView) -> dict[str, Any]:
        """What this callback ranks and names checkpoints by (Lightning's method, which programs
        override to add or rename a metric): ``callback_metrics`` with ``epoch`` and ``step``."""
        return monitor_candidates(trainer)

    def _time_due(self, trainer: TrainerView) -> bool:
        """``train_time_interval`` has passed since the last time-due save (rank 0's clock decides)."""
        if self.train_time_interval is None:
            return False
        now = time.monotonic()
        last = self._last_time_checked
        due = last is not None and now - last >= self.train_time_interval.total_seconds()
        due = bool(trainer.runtime.broadcast(due, src=0))  # clocks differ across ranks: one answer
        if due:
            self._last_time_checked = now
        return due

    def _saves_at_epoch_end(self, trainer: TrainerView) -> bool:
        return saves_at_epoch_end(self.save_on_train_epoch_end, trainer)

    # ---- names --------------------------------------------------------------------------------
    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None, prefix: str | None = None
    ) -> str:
        """The path a checkpoint saved with these values gets (Lightning's signature): ``filename``
        (default: this callback's template) filled from ``metrics`` (which hold ``epoch`` and
        ``step`` when the callback saves), ``-v<ver>`` appended, in ``dirpath`` once it is set.

        >>> ModelCheckpoint(filename="{epoch:02d}-{val_acc:.2f}").format_checkpoint_name({"epoch": 1, "val_acc": 0.9})
        'epoch=01-val_acc=0.90.ckpt'
        """
        name = self._format_checkpoint_name(
            filename or self.filename, metrics, prefix=prefix, auto_insert_metric_name=self.auto_insert_metric_name
        )
        if ver is not None:
            name = f"{name}{self.CHECKPOINT_JOIN_CHAR}v{ver}"
        name += self.FILE_EXTENSION
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _format_checkpoint_name(
        self,
        filename: str | None,
        metrics: dict[str, Any],
        prefix: str | None = None,
        auto_insert_metric_name: bool = True,
    ) -> str:
        return render_filename(
            filename,
            metrics,
            auto_insert_metric_name=auto_insert_metric_name,
            prefix=prefix,
            join=self.CHECKPOINT_JOIN_CHAR,
            equals=self.CHECKPOINT_EQUALS_CHAR,
        )

    def _free_path(
        self, trainer: TrainerView, metrics: dict[str, Any], filename: str | None, replaceable: str | None
    ) -> str:
        """A path for the new checkpoint that overwrites nothing but ``replaceable``.

        A file of the same name from another run, or one of our own still-kept checkpoints,
        must survive: the new file gets a ``-v1``, ``-v2`` suffix instead.
        """
        path = self.format_checkpoint_name(metrics, filename)
        version = self.STARTING_VERSION
        # enable_version_counter=False: the user asked for the name as it is, overwriting.
        while self.enable_version_counter and self._taken(trainer, path, replaceable):
            path = self.format_checkpoint_name(metrics, filename, ver=version)
            version += 1
        # Each rank's own name, from its own metrics (one logged without sync_dist differs by
        # rank), as Lightning's ranks name theirs: rank 1's best_model_path is rank 1's.
        return path

    def _taken(self, trainer: TrainerView, path: str, replaceable: str | None) -> bool:
        # Rank 0's answer on every rank (Lightning's file_exists broadcasts it): file systems need
        # not agree across nodes, and every rank must count the same versions.
        return bool(trainer.runtime.broadcast(os.path.exists(path) and path != replaceable, src=0))

    # ---- saving -------------------------------------------------------------------------------
    def _skip(self, trainer: TrainerView) -> bool:
        # Already saved at this step: a step-cadence save on an epoch's last batch is the same
        # training state as the epoch-end one, so it is not written twice.
        return (
            bool(trainer.fast_dev_run) or trainer.sanity_checking or trainer.global_step == self._last_global_step_saved
        )

    def _epoch_due(self, trainer: TrainerView) -> bool:
        return self.every_n_epochs > 0 and (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _save(self, trainer: TrainerView, *, mid_epoch: bool) -> None:
        metrics = self._monitor_candidates(trainer)
        ranked = monitor_available(self, metrics, mid_epoch)
        # Set before writing: this counter is part of the state the checkpoint holds.
        self._last_global_step_saved = trainer.global_step
        if self.save_top_k != 0:
            if self.monitor is None:
                save_latest(self, trainer, metrics)
            elif ranked:
                save_if_top_k(self, trainer, metrics, metrics[self.monitor])
        if last_due(self, trainer, mid_epoch=mid_epoch):
            save_last(self, trainer, metrics)

    def _write(self, trainer: TrainerView, path: str) -> None:
        self._owned.add(path)
        self._written_at_step, self._last_checkpoint_saved = trainer.global_step, path
        # The file rank 0 names (the ranks' names differ when their metrics do): every rank takes
        # part in the save, under one path.
        self._save_checkpoint(trainer, trainer.runtime.broadcast(path, src=0))

    def _save_checkpoint(self, trainer: TrainerView, filepath: str) -> None:  # Lightning's name
        # Collective: every rank calls it with the same path.
        trainer.save_checkpoint(filepath, self.save_weights_only)  # Lightning's call (a bool: no "not set" line)
        tell_loggers_of_save(self, trainer)

    def _remove(self, trainer: TrainerView, path: str) -> None:
        owned = path in self._owned
        self._owned.discard(path)
        remove_if_ours(trainer, path, owned=owned, dirpath=self.dirpath)

    def _say(self, trainer: TrainerView, message: str) -> None:
        if self.verbose:  # Lightning's words, through its logger (rank_zero_info: rank 0 only)
            rank_zero_info(f"Epoch {trainer.current_epoch:d}, global step {trainer.global_step:d}: {message}")

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Write ``best_k_models`` (path: score) to ``filepath``, by default
        ``<dirpath>/best_k_models.yaml``, as Lightning's ``ModelCheckpoint.to_yaml``."""
        write_yaml({path: score.item() for path, score in self.best_k_models.items()}, self.dirpath, filepath)

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return saved_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        restore_state(self, state_dict)
