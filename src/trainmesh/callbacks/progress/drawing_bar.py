"""trainmesh's drawing progress bar, for training, validation, test and predict runs, drawn with rich:
Lightning's ``TQDMProgressBar`` and ``RichProgressBar`` are this bar under their names (progress/__init__.py),
and the Trainer's default bar is one of them. It is written on the ``ProgressBar`` base (progress_bar.py),
which draws nothing, as Lightning's.

rich is imported inside the hooks, so importing this module costs nothing, and through
``import_leaving_rng``: its first import draws from Python's ``random``, which would change a
seeded run's numbers. Per batch the bar stores one integer; rich is touched only every
``refresh_rate`` batches.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trainmesh.callbacks.progress.bar_meter import bar_meter
from trainmesh.callbacks.progress.bar_text import (
    epoch_description,
    format_duration,
    format_metrics,
    known_total,
)
from trainmesh.callbacks.progress.progress_bar import ProgressBar
from trainmesh.callbacks.progress.stage_bars import StageBars
from trainmesh.seed import import_leaving_rng
from trainmesh.trainer_view import TrainerView

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


def _make_progress(console: Console, *, transient: bool) -> Progress:
    import_leaving_rng("rich.progress")
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class SpeedColumn(ProgressColumn):
        """Batches per second, or seconds per batch when a batch takes longer than one."""

        def render(self, task: Task) -> Text:
            speed = task.speed
            if not speed:
                return Text("? it/s", style="progress.data.speed")
            text = f"{speed:.2f} it/s" if speed >= 1 else f"{1 / speed:.2f} s/it"
            return Text(text, style="progress.data.speed")

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        SpeedColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[metrics]}"),
        console=console,
        # Redraw only when a hook asks: no background thread competing with the training loop
        # for the GIL, and the per-batch cost is nil between refreshes.
        auto_refresh=False,
        transient=transient,
    )


class DrawingProgressBar(ProgressBar):
    """Show a bar per training epoch and transient bars for validation, test and predict.

    The training bar reads ``Epoch 3/9`` (counted from 0 as Lightning's: the 4th of 10), batches done of the total,
    speed, elapsed and remaining time, and ``trainer.progress_bar_metrics``, updated every
    ``refresh_rate`` batches (``0`` turns the bar off). With ``leave=True`` each finished
    epoch's bar stays on screen. When the console is not a terminal (CI logs) nothing is
    animated: one plain line is printed per epoch and per test or predict run. Only global
    rank 0 draws. ``console`` replaces rich's default stdout console (tests pass one that
    writes to a string).

    Args:
        refresh_rate: update the bar every this many batches (0 hides it) (default ``1``).
        leave: keep each epoch's bar on screen (default ``True``).
        theme: accepted for Lightning's RichProgressBar and ignored (default ``None``).
        process_position: accepted for Lightning's TQDMProgressBar and ignored (default ``0``).
        console: a ``rich`` Console to draw on (None: stdout) (default ``None``).
        console_kwargs: arguments for the Console trainmesh makes (default ``None``).

    Examples:
        >>> bar = DrawingProgressBar(refresh_rate=10)
        >>> bar.is_enabled, bar.refresh_rate
        (True, 10)
    """

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = True,
        theme: Any = None,
        process_position: int = 0,
        *,
        console: Console | None = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        # theme and process_position are accepted so that Lightning's RichProgressBar(theme=...)
        # and TQDMProgressBar(process_position=...) run unchanged; this bar has one look.
        if refresh_rate < 0:
            raise ValueError(
                f"{type(self).__name__}(refresh_rate={refresh_rate}): it is the number of batches between "
                "redraws and cannot be negative. Use 1 to redraw every batch, 0 to hide the bar."
            )
        super().__init__()
        self.refresh_rate = refresh_rate
        self.leave = leave
        self._switched_off = False
        self.theme = theme
        self.process_position = process_position
        if console is None and console_kwargs:
            import_leaving_rng("rich.console")
            from rich.console import Console

            console = Console(**console_kwargs)
        self._console = console
        self._progress: Progress | None = None
        self._train_task: TaskID | None = None
        self._eval_task: TaskID | None = None
        self._eval_owns_progress = False  # the live display was started for an eval run alone
        self._epoch_started_at = 0.0
        self._eval_started_at = 0.0
        self._train_done = 0
        self._eval_done = 0
        # The run's throughput, shown on the bar from a monitor of the bar's own (not among the
        # Trainer's callbacks, as Lightning lists them), unless the program gave one (bar_meter.py).
        self._meter: Any = None
        self._stage_bars = StageBars()  # what a program reads as Lightning's bars (stage_bars.py)

    @property
    def console(self) -> Console:
        if self._console is None:
            import_leaving_rng("rich.console")
            from rich.console import Console

            self._console = Console()
        return self._console

    def disable(self) -> None:
        """Draw nothing from now on (on ranks other than 0, or by a program)."""
        self._switched_off = True

    def enable(self) -> None:
        self._switched_off = False

    @property
    def is_enabled(self) -> bool:
        return not self._switched_off and self.refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """Print above the bar."""
        self.console.print(sep.join(map(str, args)))

    def _draws_on(self, trainer: TrainerView) -> bool:
        return self.is_enabled and bool(getattr(trainer, "is_global_zero", True))

    def _animated(self) -> bool:
        # Not a terminal (CI, a file): a live display would print a line per refresh.
        return self.console.is_interactive

    def _ensure_progress(self, *, transient: bool) -> Progress:
        if self._progress is None:
            self._progress = _make_progress(self.console, transient=transient)
            self._progress.start()
        return self._progress

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()  # with transient=False the last frame stays on screen
        self._progress = None
        self._train_task = None
        self._eval_task = None
        self._eval_owns_progress = False

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    # training

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._meter = bar_meter(trainer, self._meter)
        self._metered("on_train_start", trainer, pl_module)

    def _metered(self, hook: str, *args: Any) -> None:
        # the meter's hook first: the bar then shows its latest figures
        if self._meter is not None:
            getattr(self._meter, hook)(*args)

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._metered("on_train_epoch_start", trainer, pl_module)
        if not self._draws_on(trainer):
            return
        self._epoch_started_at = time.monotonic()
        self._train_done = 0
        self._stage_bars.start(self, "train", epoch_description(trainer))
        if not self._animated():
            return
        if self._train_task is not None and self.leave:
            self._stop()  # freeze the finished epoch's bar above the next one
        progress = self._ensure_progress(transient=not self.leave)
        total = known_total(trainer.num_training_batches)
        description = epoch_description(trainer)
        if self._train_task is None:
            self._train_task = progress.add_task(description, total=total, metrics="")
        else:
            progress.reset(self._train_task, total=total, description=description, metrics="")
        progress.refresh()

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._metered("on_train_batch_end", trainer, pl_module, outputs, batch, batch_idx)
        self._train_done = batch_idx + 1
        self._stage_bars.advance(self, "train", self._train_done)
        if self._train_task is None or self._train_done % self.refresh_rate:
            return
        self._update_train(trainer)

    def _update_train(self, trainer: TrainerView) -> None:
        assert self._progress is not None and self._train_task is not None
        self._progress.update(
            self._train_task,
            completed=self._train_done,
            total=known_total(trainer.num_training_batches),
            metrics=format_metrics(self._bar_metrics(trainer)),
            refresh=True,
        )

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._metered("on_train_epoch_end", trainer, pl_module)
        if not self._draws_on(trainer):
            return
        if self._train_task is not None:
            self._update_train(trainer)
        elif not self._animated():
            elapsed = time.monotonic() - self._epoch_started_at
            total = known_total(trainer.num_training_batches)
            speed = self._train_done / elapsed if elapsed > 0 else 0.0
            self._print(
                f"{epoch_description(trainer)}: {self._train_done}/{'?' if total is None else total} "
                f"batches in {format_duration(elapsed)} ({speed:.2f} it/s) "
                f"{format_metrics(self._bar_metrics(trainer))}".rstrip()
            )

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._metered("on_train_end", trainer, pl_module)
        self._stop()

    def _bar_metrics(self, trainer: TrainerView) -> dict[str, Any]:
        # Callbacks with figures to show (ThroughputMonitor's samples/s, MFU) offer `bar_metrics`.
        shown = dict(self.get_metrics(trainer, getattr(trainer, "lightning_module", None)))
        shown.update(self._meter.bar_metrics if self._meter is not None else {})
        for callback in getattr(trainer, "callbacks", ()):
            shown.update(getattr(callback, "bar_metrics", None) or {})
        return shown

    # validation, test, predict: one transient bar each

    def on_sanity_check_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_eval(trainer, "Sanity check", "val_loader_batches")

    def on_sanity_check_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_eval(trainer, None)

    def on_validation_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._metered("on_validation_start", trainer, pl_module)
        if self._eval_task is None:  # on_sanity_check_start may have opened it already
            label = "Sanity check" if getattr(trainer, "sanity_checking", False) else "Validation"
            self._start_eval(trainer, label, "val_loader_batches")

    def on_validation_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start_batch(trainer, "val_loader_batches", dataloader_idx)

    def on_validation_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval(trainer, batch_idx, "val_loader_batches", dataloader_idx)

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._metered("on_validation_end", trainer, pl_module)
        self._end_eval(trainer, None)
        if self._train_task is not None and not getattr(trainer, "sanity_checking", False):
            self._update_train(trainer)  # show the validation metrics just logged

    def on_test_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_eval(trainer, "Testing", "test_loader_batches")

    def on_test_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start_batch(trainer, "test_loader_batches", dataloader_idx)

    def on_test_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval(trainer, batch_idx, "test_loader_batches", dataloader_idx)

    def on_test_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_eval(trainer, "Testing")

    def on_predict_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._start_eval(trainer, "Predicting", "predict_loader_batches")

    def on_predict_batch_start(
        self, trainer: TrainerView, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start_batch(trainer, "predict_loader_batches", dataloader_idx)

    def on_predict_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval(trainer, batch_idx, "predict_loader_batches", dataloader_idx)

    def on_predict_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._end_eval(trainer, "Predicting")

    def _start_eval(self, trainer: TrainerView, label: str, count_attr: str) -> None:
        self.reset_dataloader_idx_tracker()
        if not self._draws_on(trainer):
            return
        self._eval_started_at = time.monotonic()
        self._eval_done = 0
        sanity = getattr(trainer, "sanity_checking", False)
        self._stage_bars.start(self, self._stage_bars.stage_of(self, trainer, count_attr), label, sanity=sanity)
        if not self._animated():
            return
        if self._eval_task is not None:  # a run that ended without its end hook
            self._end_eval(trainer, None)
        self._eval_owns_progress = self._progress is None
        progress = self._ensure_progress(transient=True)
        total = known_total(getattr(trainer, count_attr, None))
        self._eval_task = progress.add_task(label, total=total, metrics="")
        progress.refresh()

    def _start_batch(self, trainer: TrainerView, count_attr: str, dataloader_idx: int) -> None:
        # At the batch's start, as Lightning's bars: from here on the base's total_*_current_dataloader
        # answers for this loader (callbacks read it in their batch-end hooks), and a new loader's bar restarts.
        if self.has_dataloader_changed(dataloader_idx):
            self._stage_bars.advance(self, self._stage_bars.stage_of(self, trainer, count_attr), 0, new_loader=True)

    def _advance_eval(self, trainer: TrainerView, batch_idx: int, count_attr: str, dataloader_idx: int) -> None:
        self._eval_done = batch_idx + 1
        stage = self._stage_bars.stage_of(self, trainer, count_attr)
        self._stage_bars.advance(self, stage, self._eval_done)
        if self._eval_task is None or self._eval_done % self.refresh_rate:
            return
        assert self._progress is not None
        total = known_total(getattr(trainer, count_attr, None))
        self._progress.update(self._eval_task, completed=self._eval_done, total=total, refresh=True)

    def _end_eval(self, trainer: TrainerView, plain_label: str | None) -> None:
        """Drop the eval bar; without a terminal print ``plain_label``'s summary line, if any."""
        if self._eval_task is not None:
            assert self._progress is not None
            self._progress.remove_task(self._eval_task)
            self._eval_task = None
            if self._eval_owns_progress:
                self._stop()
            else:
                self._progress.refresh()
        elif plain_label is not None and self._draws_on(trainer) and not self._animated():
            elapsed = time.monotonic() - self._eval_started_at
            self._print(f"{plain_label}: {self._eval_done} batches in {format_duration(elapsed)}")

    # clean-up: never leave the terminal in a live display

    def on_exception(self, trainer: TrainerView, pl_module: Any, exception: BaseException) -> None:
        self._metered("on_exception", trainer, pl_module, exception)
        self._stop()

    def teardown(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        self._stop()
        self._stage_bars.end()

    def __getstate__(self) -> dict[str, Any]:
        # Spawn launchers pickle callbacks; a live display and a console hold threads and
        # open files, so the receiving process starts without them.
        state = self.__dict__.copy()
        state.update(_progress=None, _train_task=None, _eval_task=None, _eval_owns_progress=False, _console=None)
        return state
