"""What ``self.log`` records: step values and epoch accumulators, reduced across processes.

Epoch values are batch-size-weighted means by default, accumulated on the device (so that the
hot path never waits for a device-to-host copy) in Lightning's arithmetic: float32, or float64
once a float64 value is logged. The entries it fills are ``stage_results.py``'s; their epoch
values are reduced by ``epoch_values.py`` (both re-exported here, where the loops import them).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.trainer import metric_values
from trainmesh.trainer.epoch_values import epoch_values, reset_metric_objects
from trainmesh.trainer.logging_hooks import check_can_log, resolve_levels
from trainmesh.trainer.metric_values import as_scalar, as_tensor, is_metric_object, lightning_dtype, read_floats
from trainmesh.trainer.stage_results import LoggedEntry, StageResults
from trainmesh.utilities.collections import infer_batch_size
from trainmesh.utilities.data import extract_batch_size
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.rank_zero import WarningCache

# (value, op) reduced over every data-parallel process; (value, op, group=G) over the torch process group G
Reducer = Callable[..., torch.Tensor]
__all__ = ["LogCollector", "LoggedEntry", "Reducer", "StageResults", "reset_metric_objects"]

# Defaults Lightning users expect: per step while training, per epoch while evaluating.
_STEP_HOOKS = {"training_step"}
_STEPS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
# Once per metric name and process, as Lightning's module-level cache in its result.py (and epoch_values.py's).
_WARNINGS = WarningCache()


class LogCollector:
    """Receives ``self.log`` calls from a Module and turns them into metric dicts.

    The loop tells it which hook is running (for on_step/on_epoch defaults) and the current
    batch (for the batch-size weights).
    """

    def __init__(self, reducer: Reducer) -> None:
        self._reduce = reducer
        # Set when only some ranks log (pipeline: the last stage): their results, to every rank.
        self.metrics_source: Callable[[Any], Any] | None = None
        self.world_size = 1  # the run's processes (trainer.py sets it): sync_dist reduces above 1
        self.results = StageResults()
        self.hook = "training_step"  # the stage's hook: on_step/on_epoch defaults
        self.fx = "training_step"  # the hook running now (one of the stage's batch hooks: on_train_batch_end, ...)
        self.barebones = False  # Trainer(barebones=True): self.log warns and drops the value (module.py)
        # Before a run's or a training epoch's first batch (set by the loops; a step hook clears it): a read of
        # the views shows the epoch values of what the start hooks logged, as Lightning's views compute its
        # result collection's epoch view when read there (its logger connector's _first_loop_iter None).
        self.epoch_view = False
        self._batch: Any = None
        self._batch_size: int | None = None
        self._chunk_steps: dict[str, tuple[torch.Tensor, int]] = {}
        # dp/ddp2 run a step's chunks in turn (CPU) or in one thread per device (GPU): each
        # thread knows which chunk it is stepping. ``_chunked``: a chunk scope was ever entered,
        # so self.log must look for one (other strategies never pay for the thread-local).
        self._running = threading.local()
        self._chunked = False

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles the Trainer (and this collector) to its workers: a thread-local cannot travel.
        return {key: value for key, value in self.__dict__.items() if key != "_running"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._running = threading.local()

    @contextlib.contextmanager
    def chunk_scope(self, chunk: Any) -> Iterator[None]:
        """While a split batch's ``chunk`` is stepped here, ``self.log`` weighs by its size
        (the strategy enters this around each chunk: ``StepHooks.chunk_scope``)."""
        self._chunked = True
        previous = getattr(self._running, "chunk", None)
        self._running.chunk = chunk
        try:
            yield
        finally:
            self._running.chunk = previous

    def start_stage(self, results: StageResults | None = None) -> None:
        self.results = results if results is not None else StageResults()

    def set_batch(self, hook: str, batch: Any) -> None:
        self.hook = self.fx = hook
        if hook in _STEPS:
            self.epoch_view = False
        self._batch = batch
        self._batch_size = None
        if self._chunk_steps:  # (a split batch's; most steps have none: no new dict each step)
            self._chunk_steps = {}

    def log(
        self,
        name: str,
        value: Any,
        *,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: str,
        sync_dist: bool,
        batch_size: int | None,
        add_dataloader_idx: bool = True,
        rank_zero_only: bool = False,
        sync_dist_group: Any = None,
    ) -> None:
        """Record one ``self.log`` call.

        As Lightning's, each hook (``self.fx``) logs its own metric under a name (a second hook's value
        of the name replaces the first's where both are shown), and a hook's call with other
        arguments than its earlier calls of the name raises ``MisconfigurationException``.
        ``sync_dist_group``: a torch process group of some processes that ``sync_dist`` reduces over.
        """
        key, entry = name, self.results.entries.get(name)
        given = (prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, add_dataloader_idx, rank_zero_only)
        if entry is None or entry.fx != self.fx or entry.given != given or entry.group is not sync_dist_group:
            key, entry = self._entry_for(name, given, sync_dist_group)
        if not (entry.plain_step and self.stored_step(key, value)):
            self._log_any(key, entry, value, batch_size)

    def stored_step(self, key: str, value: Any) -> bool:
        """A step value (the entry's ``plain_step``) of a scalar float tensor or a float: stored, and True
        (Module.log calls it too). No tensor is made, nothing is read from a device (where shown, it is)."""
        kind = type(value)
        scalar = kind is torch.Tensor and value.ndim == 0 and value.is_floating_point()
        if self._chunked or not (scalar or kind is float):
            return False
        self.results.step_values[key] = value if kind is float else value.detach()
        return True

    def _entry_for(self, name: str, given: tuple[Any, ...], group: Any) -> tuple[str, LoggedEntry]:
        """The entry this hook (``self.fx``) logs ``name`` into, made at its first call; a call with
        other arguments than the hook's earlier ones is refused as Lightning refuses it."""
        check_can_log(self.hook, self.fx)  # (a hook's first call of a name: no cost per step)
        entries = self.results.entries
        first = entries.get(name)
        key = name if first is None or first.fx == self.fx else f"{name}\x1f{self.fx}"
        entry = entries.get(key)
        prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, add_dataloader_idx, rank_zero_only = given
        # the running hook's defaults and allowed levels (Lightning's fx validator)
        on_step, on_epoch = resolve_levels(self.fx, self.hook in _STEP_HOOKS, on_step, on_epoch)
        if entry is None:
            if add_dataloader_idx and "/dataloader_idx_" in name:  # Lightning's check, once per name here
                raise MisconfigurationException(
                    f"You called `self.log` with the key `{name}`: the Trainer adds `/dataloader_idx_N` itself "
                    "(add_dataloader_idx=True); log the name without it, or pass add_dataloader_idx=False"
                )
            # rank_zero_only: no collective (the other ranks may not log it), as Lightning's no_op sync
            entry = self._new_entry(
                key, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist and not rank_zero_only
            )
            entry.add_dataloader_idx, entry.rank_zero_only = add_dataloader_idx, rank_zero_only
            entry.name, entry.fx, entry.group = name, self.fx, group
        elif (
            (entry.group is not group and entry.given)
            or _arguments(entry, self.world_size)
            != _arguments(
                self._new_entry(None, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist and not rank_zero_only),
                self.world_size,
            )
            or (entry.add_dataloader_idx, entry.rank_zero_only) != (add_dataloader_idx, rank_zero_only)
        ):
            # Lightning's _ResultCollection.log compares the call's metadata (defaults resolved) with the first's
            raise MisconfigurationException(
                f"You called `self.log({name}, ...)` twice in `{self.fx}` with different arguments. This is not allowed"
            )
        entry.given, entry.group = given, group  # (a checkpoint's entry takes the call's group)
        return key, entry

    def _new_entry(
        self,
        name: str | None,
        prog_bar: bool,
        logger: bool,
        on_step: bool,
        on_epoch: bool,
        reduce_fx: str,
        sync_dist: bool,
    ) -> LoggedEntry:
        entry = LoggedEntry(
            prog_bar=prog_bar,
            logger=logger,
            on_step=on_step,
            on_epoch=on_epoch,
            reduce_fx=reduce_fx,
            sync_dist=sync_dist,
        )
        if not (entry.on_step or entry.on_epoch):
            raise MisconfigurationException(  # Lightning's type: "... is not useful"
                f"self.log({name!r}, on_step=False, on_epoch=False) is not useful: it records nothing; set one of them"
            )
        if name is not None:  # (None: only the options resolved, to compare: _entry_for)
            self.results.entries[name] = entry
        return entry

    def _log_any(self, name: str, entry: LoggedEntry, value: Any, batch_size: int | None) -> None:
        """Every other case: a metric object, a chunk of a split batch, an epoch value, sync_dist."""
        if is_metric_object(value):
            entry.metric = value
            cached = getattr(value, "_forward_cache", None)
            if entry.on_step and isinstance(cached, torch.Tensor):
                self.results.step_values[name] = cached.detach()
            return
        number = as_scalar(entry.name or name, value)
        if isinstance(number, torch.Tensor) and not number.is_floating_point():
            number = _as_floating(entry.name or name, self.fx, number)
        chunk = getattr(self._running, "chunk", None) if self._chunked else None
        if chunk is not None and batch_size is None:
            batch_size = infer_batch_size(chunk)  # dp/ddp2: this device's piece of the batch
        if entry.on_step:
            step_value: torch.Tensor | float
            if chunk is not None:
                step_value = self._mean_over_chunks(name, as_tensor(number), batch_size or 0)
            else:
                step_value = number
            self.results.step_values[name] = (  # (synced in float32 or float64, as Lightning's _ResultMetric)
                self._synced(entry, metric_values.step_tensor(step_value)) if entry.sync_dist else step_value
            )
        if entry.on_epoch:
            if isinstance(number, torch.Tensor) and number.dtype == torch.float64:
                entry.wide = True
            # a number as Lightning's self.log makes it: a tensor of the default dtype (float32)
            tensor = number if isinstance(number, torch.Tensor) else torch.tensor(number, dtype=lightning_dtype())
            self._accumulate(entry, tensor, batch_size)

    def _synced(self, entry: LoggedEntry, value: torch.Tensor) -> torch.Tensor:
        if entry.group is None:
            return self._reduce(value, entry.reduce_fx)
        return self._reduce(value, entry.reduce_fx, group=entry.group)

    def _mean_over_chunks(self, name: str, tensor: torch.Tensor, size: int) -> torch.Tensor:
        """The step value of a split batch: the chunks' values weighted by their sizes."""
        total, count = self._chunk_steps.get(name, (torch.zeros((), dtype=torch.float64, device=tensor.device), 0))
        total, count = total + tensor.double() * size, count + size
        self._chunk_steps[name] = (total, count)
        return (total / max(count, 1)).to(tensor.dtype)

    def _accumulate(self, entry: LoggedEntry, tensor: torch.Tensor, batch_size: int | None) -> None:
        if entry.reduce_fx == "mean" or entry.reduce_fx == "sum":
            if batch_size is None:
                batch_size = self._mean_weight() if entry.reduce_fx == "mean" else 1
            if entry.total is None:
                entry.total = torch.zeros((), dtype=lightning_dtype(), device=tensor.device)
            elif entry.total.device != tensor.device:  # restored from a checkpoint (kept on CPU)
                entry.total = entry.total.to(tensor.device)
            if batch_size == 0:
                return  # an empty batch carries no data
            weight = batch_size if entry.reduce_fx == "mean" else 1
            if tensor.dtype not in (torch.float32, torch.float64):
                tensor = tensor.to(lightning_dtype())
            # Lightning's arithmetic (_ResultMetric.update): value * batch size added in float32
            # (a float64 value promotes the sum), so that the epoch mean is Lightning's to the last bit
            entry.total = entry.total + tensor * weight
            entry.weight += weight
        else:
            if batch_size == 0 or (batch_size is None and infer_batch_size(self._batch) == 0):
                # An empty batch: the identity of max/min, so every rank still takes part.
                if entry.total is None:
                    entry.total = torch.tensor(
                        float("-inf") if entry.reduce_fx == "max" else float("inf"),
                        dtype=torch.float64,
                        device=tensor.device,
                    )
                return
            value = tensor.to(torch.float64)
            if entry.total is None:
                entry.total = value.clone()
            else:
                entry.total = (
                    torch.maximum(entry.total, value) if entry.reduce_fx == "max" else torch.minimum(entry.total, value)
                )
            entry.weight = 1.0

    def _mean_weight(self) -> int:
        """The batch size a mean weighs a value by when ``self.log`` is given none: Lightning's
        ``extract_batch_size`` of the batch (its first tensor's dim 0; warns when ambiguous; raises
        when the batch holds no tensor), read once per batch; 1 where there is no batch."""
        if self._batch_size is None:
            if self._batch is None:
                return 1
            self._batch_size = extract_batch_size(self._batch)
        return self._batch_size

    def end_step(self) -> None:
        """A step's values are complete: where only the last pipeline stage logs, every other
        stage takes its results, so callbacks and loggers decide alike on every rank."""
        if self.metrics_source is None:
            return
        mine = {
            "entries": self.results.state_dict(),
            "step_values": {
                k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in self.results.step_values.items()
            },
        }
        shared = self.metrics_source(mine)
        if shared is mine:
            return  # this rank is a logging one: it keeps its own (metric objects included)
        results = self.results
        device = next((v.device for v in results.step_values.values() if isinstance(v, torch.Tensor)), None)
        results.entries.clear()
        results.load_state_dict(shared["entries"])
        results.step_values.clear()
        results.step_values.update(
            {
                k: v.to(device) if device is not None and isinstance(v, torch.Tensor) else v
                for k, v in shared["step_values"].items()
            }
        )

    # ---- reading metrics --------------------------------------------------------------------
    def step_metrics(
        self, *, prog_bar_only: bool = False, logger_only: bool = False, suffix: str = ""
    ) -> dict[str, float]:
        """The step values under Lightning's names (``suffix``: an evaluation loader's ``/dataloader_idx_N``)."""
        chosen: dict[str, torch.Tensor | float] = {}
        entries = self.results.entries
        for key, value in self.results.step_values.items():
            entry = entries[key]
            if (prog_bar_only and not entry.prog_bar) or (logger_only and not entry.logger):
                continue
            end, name = suffix if entry.add_dataloader_idx else "", entry.name or key
            chosen[(f"{name}_step" if entry.on_epoch else name) + end] = value
        return read_floats(chosen)

    def wide_step_names(self) -> set[str]:
        """The names, as :meth:`step_metrics` gives them, whose step value is a float64 tensor:
        Lightning keeps those float64 (lightning_dtype)."""
        entries = self.results.entries
        return {
            f"{entries[key].name or key}_step" if entries[key].on_epoch else entries[key].name or key
            for key, value in self.results.step_values.items()
            if isinstance(value, torch.Tensor) and value.dtype == torch.float64
        }

    def epoch_metrics(self) -> dict[str, tuple[float, LoggedEntry]]:
        """Each epoch-level metric: reduced across processes where logged with ``sync_dist``, else
        this process's own (Lightning's rule)."""
        self.end_step()
        return epoch_values(self.results, self._reduce)


def _arguments(entry: LoggedEntry, world_size: int) -> tuple[Any, ...]:
    # What Lightning's _Metadata equality compares that trainmesh keeps; sync_dist only where it syncs
    return (
        entry.prog_bar,
        entry.logger,
        entry.on_step,
        entry.on_epoch,
        entry.reduce_fx,
        entry.sync_dist and world_size > 1,
    )


def _as_floating(name: str, fx: str, value: torch.Tensor) -> torch.Tensor:
    """An integer or bool tensor logged: Lightning 2.6's warning (its ``_ResultMetric.update``), once
    per name and hook, and the value in the default dtype, as Lightning reduces it."""
    dtype = lightning_dtype()
    _WARNINGS.warn(
        f"You called `self.log({name!r}, ...)` in your `{fx}` but the value needs to"
        f" be floating to be reduced. Converting it to {dtype}."
        " You can silence this warning by converting the value to floating point yourself."
        " If you don't intend to reduce the value (for instance when logging the global step or epoch) then"
        f" you can use `self.logger.log_metrics({{{name!r}: ...}})` instead."
    )
    return value.to(dtype)
