"""``lightning.fabric.utilities.throughput``: Fabric's ``Throughput``, ``ThroughputMonitor(fabric)`` and
``get_available_flops``, defined as Lightning Fabric 2.6 defines them (adapted from its module, Apache-2.0;
Fabric's own is adapted from mosaicml composer's speed monitor), and ``measure_flops``, trainmesh's.

A program feeds ``update`` the totals it counted (time, batches, samples, lengths, flops); ``compute``
returns the rates over the last ``window_size`` updates under Fabric's metric names
(``device/samples_per_sec``, ``samples_per_sec`` with more than one process, ``device/mfu``, ...).
This is not the Trainer side's ``trainmesh.callbacks.ThroughputMonitor``, which measures a fit by itself.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from trainmesh.utilities.flops import measure_flops
from trainmesh.utilities.rank_zero import rank_zero_only, rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.fabric.fabric import Fabric

__all__ = ["Throughput", "ThroughputMonitor", "get_available_flops", "measure_flops"]

_THROUGHPUT_METRICS = dict[str, int | float]

T = TypeVar("T", bound=float)


class Throughput:
    """Throughput metrics over a window of ``update`` calls (Fabric's ``Throughput``).

    >>> throughput = Throughput(window_size=2)
    >>> throughput.update(time=1.0, batches=1, samples=4)
    >>> throughput.update(time=3.0, batches=2, samples=8)
    >>> throughput.compute()
    {'time': 3.0, 'batches': 2, 'samples': 8, 'device/batches_per_sec': 0.5, 'device/samples_per_sec': 2.0}

    Args:
        available_flops: the device's peak FLOP/s, for ``device/mfu``.
        world_size: the number of devices; above 1 the global rates are added.
        window_size: how many ``update`` calls the rates are measured over (at least 2).
        separator: between ``device`` and a per-device metric's name.
    """

    def __init__(
        self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100, separator: str = "/"
    ) -> None:
        self.available_flops = available_flops
        self.separator = separator
        assert world_size > 0
        self.world_size = world_size
        # the rates look at the first and last values of the window: at least 2
        assert window_size > 1
        # not ``deque(maxlen=)``: a counter that does not increase is an error, as in Fabric
        self._time: _MonotonicWindow[float] = _MonotonicWindow(maxlen=window_size)
        self._batches: _MonotonicWindow[int] = _MonotonicWindow(maxlen=window_size)
        self._samples: _MonotonicWindow[int] = _MonotonicWindow(maxlen=window_size)
        self._lengths: _MonotonicWindow[int] = _MonotonicWindow(maxlen=window_size)
        self._flops: deque[int] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: int | None = None
    ) -> None:
        """Record totals: elapsed ``time`` (s), ``batches`` and ``samples`` seen per device, the samples'
        total ``lengths``, and the ``flops`` per device since the previous call."""
        self._time.append(time)
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})")
            self._lengths.append(lengths)
            if len(self._samples) != len(self._lengths):
                raise RuntimeError(
                    f"If lengths are passed ({len(self._lengths)}), there needs to be the same number of samples"
                    f" ({len(self._samples)})"
                )
        if flops is not None:
            self._flops.append(flops * self.world_size)  # summed over the ranks

    def compute(self) -> _THROUGHPUT_METRICS:
        """The totals last recorded and, once the window is full, the rates over it."""
        metrics: _THROUGHPUT_METRICS = {
            "time": self._time[-1],
            "batches": self._batches[-1],
            "samples": self._samples[-1],
        }
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        add_global_metrics = self.world_size > 1
        # rates only once the window is full, as Fabric does
        if len(self._time) == self._time.maxlen:
            elapsed_time = self._time[-1] - self._time[0]
            elapsed_batches = self._batches[-1] - self._batches[0]
            elapsed_samples = self._samples[-1] - self._samples[0]
            dev_samples_per_sec = elapsed_samples / elapsed_time  # time increases strictly: no zero
            dev_batches_per_sec = elapsed_batches / elapsed_time
            metrics.update(
                {
                    f"device{self.separator}batches_per_sec": elapsed_batches / elapsed_time,
                    f"device{self.separator}samples_per_sec": dev_samples_per_sec,
                }
            )
            if add_global_metrics:
                metrics.update(
                    {
                        "batches_per_sec": dev_batches_per_sec * self.world_size,
                        "samples_per_sec": dev_samples_per_sec * self.world_size,
                    }
                )
            if len(self._lengths) == self._lengths.maxlen:
                dev_items_per_sec = (self._lengths[-1] - self._lengths[0]) / elapsed_time
                metrics[f"device{self.separator}items_per_sec"] = dev_items_per_sec
                if add_global_metrics:
                    metrics["items_per_sec"] = dev_items_per_sec * self.world_size
        if len(self._flops) == self._flops.maxlen:
            # Fabric's arithmetic: the window's sum less its first entry
            elapsed_flops = sum(self._flops) - self._flops[0]
            flops_per_sec = elapsed_flops / (self._time[-1] - self._time[0])
            dev_flops_per_sec = flops_per_sec / self.world_size
            if add_global_metrics:
                metrics["flops_per_sec"] = flops_per_sec
            metrics[f"device{self.separator}flops_per_sec"] = dev_flops_per_sec
            if self.available_flops:
                metrics[f"device{self.separator}mfu"] = dev_flops_per_sec / self.available_flops
        return metrics

    def reset(self) -> None:
        self._time.clear()
        self._batches.clear()
        self._samples.clear()
        self._lengths.clear()
        self._flops.clear()


class ThroughputMonitor(Throughput):
    """``Throughput`` for a Fabric run: the device's peak FLOP/s and the world size from ``fabric``, and
    ``compute_and_log(step=None)`` logging the metrics through ``fabric.log_dict`` (the step counts the
    calls unless given). Rank 0 records, computes and logs; the other ranks' calls return ``{}``/None."""

    def __init__(self, fabric: Fabric, **kwargs: Any) -> None:
        fabric._validate_launched()  # otherwise world_size might be incorrect
        dtype = fabric._precision.precision.compute_dtype
        available_flops = get_available_flops(fabric.device, dtype)
        super().__init__(available_flops=available_flops, world_size=fabric.world_size, **kwargs)
        self._fabric = fabric
        self.step = -1
        # Fabric's own instance attributes (this class's objects, not a user's)
        self.update = rank_zero_only(self.update)  # type: ignore[method-assign]
        self.compute = rank_zero_only(self.compute, default={})  # type: ignore[method-assign]
        self.compute_and_log = rank_zero_only(self.compute_and_log, default={})  # type: ignore[method-assign]
        self.reset = rank_zero_only(self.reset)  # type: ignore[method-assign]

    def compute_and_log(self, step: int | None = None, **kwargs: Any) -> _THROUGHPUT_METRICS:
        """``compute()``, logged with ``fabric.log_dict`` at ``step`` (the call count when not given)."""
        self.step = (self.step + 1) if step is None else step
        metrics = self.compute(**kwargs)
        self._fabric.log_dict(metrics=metrics, step=self.step)
        return metrics


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The device's theoretical peak FLOP/s for ``dtype`` from Fabric's table (``cuda_flops``); None with a
    warning where the chip or dtype is not in it. Not CUDA: None, as Fabric (a TPU cannot exist here)."""
    if device.type != "cuda":
        return None
    from trainmesh.fabric.utilities.cuda_flops import CUDA_FLOPS

    device_name = torch.cuda.get_device_name(device)
    chip = _chip(device_name.lower())
    if chip is None:
        rank_zero_warn(f"FLOPs not found for {device_name!r}")  # the table is not exhaustive
        return None
    if chip not in CUDA_FLOPS:
        rank_zero_warn(f"FLOPs not found for {device_name!r}, chip is {chip!r}")
        return None
    dtype_to_flops = CUDA_FLOPS[chip]
    if dtype is torch.float32:
        ampere_or_later = torch.cuda.get_device_capability(device)[0] >= 8
        if ampere_or_later and torch.get_float32_matmul_precision() != "highest":
            dtype = "tfloat32"
    if dtype not in dtype_to_flops:
        rank_zero_warn(f"{device_name!r} does not support {dtype}")  # T4 has no bfloat16
        return None
    return int(dtype_to_flops[dtype])


def _chip(chip: str) -> str | None:
    """Fabric's key of ``CUDA_FLOPS`` for a lower-cased CUDA device name, None for a chip it does not parse."""
    if "h200" in chip:
        if "sxm1" in chip:
            return "h200 sxm1"
        if "nvl1" in chip:
            return "h200 nvl1"
        return chip
    if "h100" in chip:
        if "hbm3" in chip:
            return "h100 sxm"
        if "nvl" in chip:
            return "h100 nvl"
        if "pcie" in chip or "hbm2e" in chip:
            return "h100 pcie"
        return chip
    if "l4" in chip:
        return "l40" if "tesla" in chip else "l4"
    if "geforce rtx" in chip:
        number = chip.split(" ")[3]
        extra = " super" if "super" in chip else " ti" if "ti" in chip else ""
        return f"rtx {number}{extra}"
    for key, name in (
        ("a6000", "a6000"),
        ("a100", "a100"),
        ("a40", "a40"),
        ("a10g", "a10g"),
        ("t4", "t4"),
        ("quadro rtx 5000", "quadro rtx 5000"),
        ("titan rtx", "titan rtx"),
        ("v100-sxm", "v100 sxm"),
        ("v100-pcie", "v100 pcie"),
        ("v100s-pcie", "v100s pcie"),
    ):
        if key in chip:
            return name
    return None


class _MonotonicWindow(list[T]):
    """A list of at most ``maxlen`` values, appended on the right, each larger than the last (Fabric's)."""

    def __init__(self, maxlen: int) -> None:
        super().__init__()
        self.maxlen = maxlen

    def append(self, x: T) -> None:
        last = self[-1] if self else None
        if last is not None and last >= x:
            raise ValueError(f"Expected the value to increase, last: {last}, current: {x}")
        list.append(self, x)
        if len(self) > self.maxlen:
            del self[0]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise NotImplementedError("__setitem__ is not supported")
