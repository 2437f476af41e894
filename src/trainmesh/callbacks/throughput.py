"""Throughput of every training run: samples, batches and tokens per second, FLOPs, MFU, data wait, memory.

The per-batch cost is one hook at the batch's end that reads one tensor's shape, with no device
synchronisation (under 1% of a 0.8 ms CPU step, measured by ``benchmarks/loop_overhead.py``);
the fit loop itself times the wait for each batch. Rates are computed once per logging window
(``log_every_n_steps``), where one synchronisation on CUDA makes the window's wall time include
the work queued in it. FLOPs are counted once, over the first step's forward and backward, with
torch's ``FlopCounterMode`` counts and every op's own kernel (``utilities/exact_flop_counter.py``:
torch's counter would run some ops through other arithmetic and train the step to other weights),
imported then, not when this module is imported.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.module_hooks import ModelHooks
from trainmesh.runtime_optimizer import has_own_step
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.collections import first_tensor
from trainmesh.utilities.compiled import has_compiled_part

# Dense (no structured sparsity) peak FLOP/s per device, from the vendors' data sheets; the
# SXM figures unless the name says PCIe/NVL. fp32 is plain FP32, not TF32: a run that enables
# TF32 gets a pessimistic MFU, never an inflated one. Longer keys first: "h100 pcie" before "h100".
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "h200": {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 66.9e12},
    "h100 nvl": {"bf16": 835.5e12, "fp16": 835.5e12, "fp32": 60.0e12},
    "h100 pcie": {"bf16": 756.5e12, "fp16": 756.5e12, "fp32": 51.2e12},
    "h100": {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 66.9e12},
    "a100": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
    "l40s": {"bf16": 362.05e12, "fp16": 362.05e12, "fp32": 91.6e12},
    "l4": {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12},
    "a10g": {"bf16": 70e12, "fp16": 70e12, "fp32": 31.2e12},
    "v100": {"fp16": 125e12, "fp32": 15.7e12},  # no bf16 units
    "t4": {"fp16": 65e12, "fp32": 8.1e12},
}

PREFIX = "throughput/"

# Where the monitor's one FLOP count stands.
_PENDING, _COUNTING, _COUNTED, _DONE = "pending", "counting", "counted", "done"


def peak_flops_for(device_name: str, precision: str) -> float | None:
    """The table's dense peak FLOP/s for a device name (as CUDA reports it) and a precision setting.

    >>> peak_flops_for("NVIDIA H100 80GB HBM3", "bf16-mixed")
    989400000000000.0
    >>> peak_flops_for("NVIDIA A100-SXM4-80GB", "32-true")
    19500000000000.0
    >>> peak_flops_for("cpu", "32-true") is None
    True
    """
    dtype = "bf16" if "bf16" in precision else "fp16" if precision.startswith("16") else "fp32"
    name = device_name.lower()
    for key in sorted(PEAK_FLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_FLOPS[key].get(dtype)
    return None


def throughput_figures(
    *,
    seconds: float,
    data_seconds: float,
    batches: int,
    samples: int,
    tokens: int | None,
    flops_per_batch: int | None,
    peak_flops: float | None,
) -> dict[str, float]:
    """Rates over one window of ``seconds`` of training (this process's share of the work).

    >>> figures = throughput_figures(seconds=2.0, data_seconds=0.5, batches=10, samples=160, tokens=None,
    ...                              flops_per_batch=3_000, peak_flops=30_000.0)
    >>> figures["samples_per_sec"], figures["flops_per_sec"], figures["mfu"], figures["data_wait_share"]
    (80.0, 15000.0, 0.5, 0.25)
    """
    assert seconds > 0, "a window has a positive duration"
    figures = {
        "batches_per_sec": batches / seconds,
        "samples_per_sec": samples / seconds,
        "data_wait_share": data_seconds / seconds,
    }
    if tokens is not None:
        figures["tokens_per_sec"] = tokens / seconds
    if flops_per_batch is not None:
        figures["flops_per_sec"] = flops_per_batch * batches / seconds
        if peak_flops:
            figures["mfu"] = figures["flops_per_sec"] / peak_flops
    return figures


def token_count(inputs: torch.Tensor | None) -> int | None:
    """``B * T`` for an integer input of shape ``(B, T)`` (token ids); None for any other input.

    >>> token_count(torch.zeros(4, 128, dtype=torch.long)), token_count(torch.zeros(4, 128))
    (512, None)
    """
    if inputs is None or inputs.dim() != 2 or inputs.is_floating_point() or inputs.is_complex():
        return None
    return inputs.shape[0] * inputs.shape[1]


def count_step_flops() -> Any:
    """A ``FlopCounterMode`` that prints nothing and changes no result of the counted step (torch's own
    runs some ops through other arithmetic, see ``exact_flop_counter``):
    ``with count_step_flops() as c: ...; c.get_total_flops()``."""
    from trainmesh.utilities.exact_flop_counter import ExactFlopCounterMode  # imported when counting

    return ExactFlopCounterMode(display=False)


class ThroughputMonitor(Callback):
    """Log what the hardware delivers: samples/s, batches/s, tokens/s, FLOP/s, MFU, data wait, peak memory.

    Every ``log_every_n_steps`` optimizer steps the loggers receive ``throughput/samples_per_sec``,
    ``throughput/batches_per_sec``, ``throughput/data_wait_share`` (the share of the window spent
    waiting for the next batch), ``throughput/peak_memory_mb`` (peak RSS on CPU,
    ``torch.cuda.max_memory_allocated`` on CUDA), and where known ``throughput/tokens_per_sec``,
    ``throughput/flops_per_sec`` and ``throughput/mfu``. Figures are this process's (one device's).

    Samples: a batch's first tensor's first dimension, or Lightning's ``batch_size_fn(batch) -> int``.
    Tokens: a batch whose input (first tensor) is an integer tensor of shape ``(B, T)`` counts
    ``B * T``; ``tokens_per_sample``, ``tokens_in_batch(batch) -> int`` or Lightning's
    ``length_fn(batch) -> int`` (the batch's items) says otherwise. Lightning's keys differ
    (``train/samples_per_sec``, ...): trainmesh logs ``throughput/...``. FLOPs per
    batch (forward and backward) are counted on the first training batch; MFU divides the FLOP/s by
    ``peak_flops`` (per device), or by the table's figure for the CUDA device and precision (CPU:
    no MFU unless given). The Trainer adds one to every run that shows a progress bar, and the bar
    shows ``samples/s`` (and ``MFU``); that one sends nothing to the loggers (``to_loggers=False``),
    so their files hold what the program logged, as Lightning's: add one to log the figures.

    Args:
        batch_size_fn: Lightning's: a function giving a batch's sample count (None: the first tensor's first dimension) (default ``None``).
        length_fn: Lightning's: a function giving a batch's item (token) count, as ``tokens_in_batch`` (default ``None``).
        tokens_per_sample: tokens in one sample, for tokens/s (None: counted for integer ``(B, T)`` inputs) (default ``None``).
        tokens_in_batch: a function giving a batch's token count (default ``None``).
        peak_flops: the device's peak FLOP/s, for MFU (None: from the table of known GPUs) (default ``None``).
        count_flops: count FLOPs on the first step (default ``True``).
        to_loggers: send the figures to the loggers; False keeps them for the progress bar (``last_figures``) only (default ``True``).

    Examples:
        >>> monitor = ThroughputMonitor(tokens_per_sample=512, peak_flops=312e12)
        >>> # Trainer(callbacks=[monitor]) logs e.g. {"throughput/samples_per_sec": 880.0, "throughput/mfu": 0.41}
    """

    def __init__(
        self,
        batch_size_fn: Callable[[Any], int] | None = None,
        length_fn: Callable[[Any], int] | None = None,
        *,
        tokens_per_sample: int | None = None,
        tokens_in_batch: Callable[[Any], int] | None = None,
        peak_flops: float | None = None,
        count_flops: bool = True,
        to_loggers: bool = True,
    ) -> None:
        if sum(given is not None for given in (tokens_per_sample, tokens_in_batch, length_fn)) > 1:
            raise ValueError(
                "ThroughputMonitor: give one of tokens_per_sample, tokens_in_batch and length_fn; "
                "tokens_in_batch(batch) and Lightning's length_fn(batch) both return the batch's token count"
            )
        if peak_flops is not None and peak_flops <= 0:
            raise ValueError(f"ThroughputMonitor(peak_flops={peak_flops}): the device's peak FLOP/s must be positive")
        self.tokens_per_sample = tokens_per_sample
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.tokens_in_batch = tokens_in_batch if length_fn is None else length_fn
        self.peak_flops = peak_flops
        self.count_flops = count_flops
        self.to_loggers = to_loggers  # False: figures for the progress bar only
        self.flops_per_batch: int | None = None
        self.last_figures: dict[str, float] = {}  # the latest window's figures, unprefixed
        self.history: list[dict[str, float]] = []  # every window's figures (global rank 0 logs them)
        self._counter: Any = None
        self._flops = _DONE  # where the one FLOP count stands: _PENDING, _COUNTING, _COUNTED, _DONE
        self._count_from_batches = 0  # the loop's batches_done when the count began
        self._step_hooks: list[Any] = []
        self._reset_window(time.perf_counter())

    def _reset_window(self, now: float, data_seconds: float = 0.0) -> None:
        self._window_start = now
        self._window_data_seconds = data_seconds  # the fit loop's data wait so far, when the window opened
        self._paused_at: float | None = None
        self._excluded = 0.0  # validation and epoch-boundary time inside the window
        self._batches = 0
        self._samples = 0
        self._tokens: int | None = 0
        self._last_logged_step = -1

    @property
    def bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows: samples/s, and MFU where known."""
        shown = {"samples/s": self.last_figures["samples_per_sec"]} if self.last_figures else {}
        if "mfu" in self.last_figures:
            shown["MFU"] = self.last_figures["mfu"]
        return shown

    # ---- hooks --------------------------------------------------------------------------------
    # One hook runs every step, on_train_batch_end, and briefly: in a training step each Python
    # call costs about a microsecond (caches cold after the step's kernels), and the target is 2%
    # of a 0.8 ms CPU step (benchmarks/loop_overhead.py). So no on_train_batch_start: the fit loop
    # times the wait for each batch itself (``trainer.loop.data_seconds``), and the FLOP count
    # starts at the epoch's start.
    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self.last_figures, self.history = {}, []
        if self.peak_flops is None:
            self._peak = _table_peak(trainer)
        else:
            self._peak = self.peak_flops
        # A dispatch mode around a compiled module's first call would be traced into its graph.
        compiled = has_compiled_part(getattr(trainer, "model", None))
        # Where one rank's count is not its share (the model itself split: tensor parallel,
        # pipelines), the strategy says so: no FLOPs, hence no MFU, rather than a wrong figure.
        counts = (
            self.count_flops
            and self.flops_per_batch is None
            and not compiled
            and trainer.runtime.capabilities.flop_counting
        )
        self._flops = _PENDING if counts else _DONE
        self._reset_window(time.perf_counter(), _data_seconds(trainer))

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._resume(time.perf_counter())
        if self._flops is _PENDING:
            self._start_flop_count(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._flops is not _DONE:
            self._flop_count_at_batch_end(trainer, pl_module)
            return
        self._batches += 1
        first = first_tensor(batch)
        shape = () if first is None else first.shape  # one read of the tensor
        samples = int(self.batch_size_fn(batch)) if self.batch_size_fn is not None else shape[0] if shape else 1
        self._samples += samples
        if self._tokens is not None:
            self._count_tokens(batch, first, samples)
        step = trainer.global_step
        every = trainer.log_every_n_steps  # 0: no window is ever logged, as Lightning's should_update_logs
        if every and step % every == 0 and step != self._last_logged_step:
            self._last_logged_step = step
            self._close_window(trainer)

    def on_validation_start(self, trainer: TrainerView, pl_module: Any) -> None:
        self._pause(time.perf_counter())
        if self._flops is _COUNTING:  # validation inside the counted step (accumulating, checking every batch)
            self._end_flop_count(trainer)

    def on_validation_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._resume(time.perf_counter())

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._flops is _COUNTING:
            self._end_flop_count(trainer)
        if self._flops is _COUNTED:  # ended by this epoch's last validation: no batch end follows
            self._flops = _DONE
            self._reset_window(time.perf_counter(), _data_seconds(trainer))
        self._pause(time.perf_counter())

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        self._abandon_flop_count()

    def on_exception(self, trainer: TrainerView, pl_module: Any, exception: BaseException) -> None:
        self._abandon_flop_count()

    # ---- bookkeeping --------------------------------------------------------------------------
    def _pause(self, now: float) -> None:
        if self._paused_at is None:
            self._paused_at = now

    def _resume(self, now: float) -> None:
        if self._paused_at is not None:
            self._excluded += now - self._paused_at
            self._paused_at = None

    # The FLOP count: the forward and backward of one real training step, counted where they run
    # (no copy of the model, no state changed). It starts at the first epoch's start and ends at
    # the first of: the optimizer's step (a pre-hook, removed when it fires: an optimizer's ops
    # count no FLOPs, and under the counter each op is dispatched through Python, so an Adam step
    # would take most of the counted step's extra time), validation, the batch's end. A run that
    # resumes inside an epoch starts it at its first batch's end, counting the next step. A count
    # that saw no training step (the epoch ended first) is dropped and tried again.
    def _start_flop_count(self, trainer: TrainerView, module: Any) -> None:
        self._flops = _COUNTING
        self._count_from_batches = _batches_done(trainer)
        self._counter = count_step_flops()
        self._counter.__enter__()
        # A module that steps itself, or overrides optimizer_step, may pass step() a closure that runs
        # forward and backward (Lightning's optimizer_closure), as LBFGS needs: its count ends with the batch.
        if not getattr(module, "automatic_optimization", True) or _steps_through_closure(trainer, module):
            return
        for optimizer in getattr(trainer, "optimizers", ()):  # the program's own optimizers, as Lightning's
            if isinstance(optimizer, torch.optim.Optimizer):
                self._step_hooks.append(optimizer.register_step_pre_hook(self._end_count_before_step))

    def _end_count_before_step(self, *args: Any) -> None:
        self._stop_counter(keep=True)  # backward has run: the step's FLOPs are all counted
        self._flops = _COUNTED

    def _end_flop_count(self, trainer: TrainerView) -> None:
        stepped = _batches_done(trainer) != self._count_from_batches
        self._stop_counter(keep=stepped)
        self._flops = _COUNTED if stepped else _PENDING

    def _flop_count_at_batch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._flops is _PENDING:  # resumed inside an epoch: count the next step
            self._start_flop_count(trainer, module)
            return
        if self._flops is _COUNTING:
            self._end_flop_count(trainer)
        # The counted step ran slower: the first window starts after it.
        self._flops = _DONE
        self._reset_window(time.perf_counter(), _data_seconds(trainer))

    def _abandon_flop_count(self) -> None:
        self._stop_counter(keep=False)
        self._flops = _DONE

    def _stop_counter(self, *, keep: bool) -> None:
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks = []
        counter, self._counter = self._counter, None
        if counter is not None:
            counter.__exit__(None, None, None)
            if keep:
                self.flops_per_batch = int(counter.get_total_flops())

    def _count_tokens(self, batch: Any, first: torch.Tensor | None, samples: int) -> None:
        assert self._tokens is not None  # the caller counts only while tokens are counted
        if self.tokens_in_batch is not None:
            self._tokens += int(self.tokens_in_batch(batch))
        elif self.tokens_per_sample is not None:
            self._tokens += samples * self.tokens_per_sample
        elif (tokens := token_count(first)) is not None:
            self._tokens += tokens
        else:
            self._tokens = None  # not a token batch: no tokens/s for this run

    def _close_window(self, trainer: TrainerView) -> None:
        device = getattr(getattr(trainer, "runtime", None), "device", torch.device("cpu"))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # once per window: its time then covers the work queued in it
        now = time.perf_counter()
        seconds = now - self._window_start - self._excluded
        if seconds <= 0 or not self._batches:
            return
        data_seconds = _data_seconds(trainer)
        figures = throughput_figures(
            seconds=seconds,
            data_seconds=data_seconds - self._window_data_seconds,
            batches=self._batches,
            samples=self._samples,
            tokens=self._tokens or None,
            flops_per_batch=self.flops_per_batch,
            peak_flops=self._peak,
        )
        figures["peak_memory_mb"] = peak_memory_bytes(device) / 2**20
        self.last_figures = figures
        self.history.append(figures)
        tokens = self._tokens
        self._reset_window(now, data_seconds)
        self._last_logged_step = trainer.global_step
        self._tokens = tokens if tokens is None else 0  # once known not to be tokens, stay so
        if self.to_loggers and trainer.is_global_zero and not trainer.sanity_checking and trainer.loggers:
            logged = {PREFIX + name: value for name, value in figures.items()}
            for logger in trainer.loggers:
                logger.log_metrics(metrics=logged, step=trainer.global_step)  # through its logger connector: by keyword


def _steps_through_closure(trainer: TrainerView, module: Any) -> bool:
    inners = list(getattr(trainer, "optimizers", ()))  # the program's own optimizers, as Lightning's
    default = ModelHooks.optimizer_step  # what every Module inherits (module_hooks.py)
    overridden = getattr(type(module), "optimizer_step", default) is not default
    if overridden or any(isinstance(inner, torch.optim.LBFGS) for inner in inners):
        return True
    # An optimizer with a step of its own trains inside it, through the closure (as under Lightning)
    return any(has_own_step(inner) for inner in inners if isinstance(inner, torch.optim.Optimizer))


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process: allocated tensors on CUDA, resident set size elsewhere."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource
    except ImportError:  # Windows has no getrusage
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def _data_seconds(trainer: TrainerView) -> float:
    """Seconds the fit loop has waited for training batches so far (0 where there is no loop)."""
    return getattr(getattr(trainer, "loop", None), "data_seconds", 0.0)


def _batches_done(trainer: TrainerView) -> int:
    return getattr(getattr(trainer, "loop", None), "batches_done", 0)


def _table_peak(trainer: TrainerView) -> float | None:
    device = getattr(getattr(trainer, "runtime", None), "device", None)
    if device is None or device.type != "cuda":
        return None
    return peak_flops_for(torch.cuda.get_device_name(device), str(getattr(trainer, "precision", "32")))
