"""``strategy="auto"``: the least sharding whose per-rank memory estimate fits a device.

With one process "auto" is single-device. With several, the model is needed to decide, so the
choice is made once the Trainer has it (``Runtime.trainer_port.choose_strategy``, just before the processes
start): ddp when its estimate fits the per-device budget, else zero1, sharded, fsdp, in that
order (each shards more and communicates more). All four start the same processes (one per
device, elastic), so the launcher built for the provisional ddp stays right.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch import nn

from trainmesh.strategies.protocol import Placement

# Less sharding first: each next one saves memory and adds communication.
CANDIDATES = ("ddp", "zero1", "sharded", "fsdp")


@dataclasses.dataclass(frozen=True)
class AutoStrategy:
    """``Trainer(strategy=AutoStrategy(memory_budget=...))``: "auto" with a per-rank budget in bytes.

    Without a budget it is the device's memory (CUDA), or on CPU the machine's RAM divided by the
    processes on this node. ``optimizer`` and ``batch`` refine the estimate (Adam assumed; a
    sample per-rank batch adds the activations).

    Args:
        memory_budget: bytes a process may use (None: the GPU's memory, or the RAM per process on CPU) (default ``None``).
        optimizer: the optimizer the estimate assumes (default ``'adam'``).
        batch: one input batch to measure activations with (None: none) (default ``None``).

    Examples:
        >>> AutoStrategy(memory_budget=2**30).choose(torch.nn.Linear(4, 4), world_size=2)[0]
        'ddp'
    """

    memory_budget: int | None = None
    optimizer: Any = "adam"
    batch: Any = None

    def with_placement(self, placement: Placement) -> Any:
        """The provisional strategy, before the model is known: single for one process, else ddp."""
        from trainmesh.strategies.registry import STRATEGIES

        processes = len(placement.devices) * placement.num_nodes
        return STRATEGIES["single" if processes == 1 else "ddp"](placement=placement)

    def choose(
        self, model: nn.Module, *, world_size: int, placement: Placement | None = None, built_on_meta: bool = False
    ) -> tuple[str, str]:
        """The strategy name for ``model`` on ``world_size`` ranks and one line saying why.
        ``built_on_meta``: ``model`` is a copy whose ``configure_model`` layers were built on the
        meta device (``trainmesh.model_configuration.built_for_estimate``)."""
        from trainmesh.memory_estimate import estimate_memory

        placement = placement or Placement()
        budget = self.memory_budget or device_memory_budget(placement)
        precision = placement.precision.name
        mib = 2**20
        tried: list[str] = []
        # A batch cannot run through layers that exist only on the meta device: no activations then.
        batch = None if built_on_meta else self.batch
        counted = " (layers built in configure_model counted, on the meta device)" if built_on_meta else ""
        for name in CANDIDATES:
            estimate = estimate_memory(
                model, strategy=name, world_size=world_size, precision=precision, optimizer=self.optimizer, batch=batch
            )
            if estimate.peak <= budget:
                because = "; ".join(tried + [f"{name} needs {estimate.peak / mib:.1f} MiB"])
                return name, (
                    f'strategy="auto" picked {name}: {because} per rank{counted}, within the budget of '
                    f"{budget / mib:.1f} MiB per device"
                )
            tried.append(f"{name} needs {estimate.peak / mib:.1f} MiB")
        raise ValueError(
            f'strategy="auto" found no data-parallel strategy that fits {budget / mib:.1f} MiB per device on '
            f"{world_size} ranks ({'; '.join(tried)}): split the model itself with strategy='fsdp_tp' (tensor "
            "parallel pairs, sharded across them) or 'pp' (pipeline stages), use more devices, or raise the "
            "budget with AutoStrategy(memory_budget=...)"
        )


def device_memory_budget(placement: Placement) -> int:
    """Bytes one rank may use: the smallest used GPU's memory, or on CPU the RAM per process."""
    if placement.device_type == "cuda":
        return min(torch.cuda.get_device_properties(i).total_memory for i in placement.devices)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return ram // max(1, len(placement.devices))


def auto_strategy(strategy: Any) -> AutoStrategy | None:
    """The AutoStrategy that ``Trainer(strategy=...)`` means: for "auto" and AutoStrategy objects."""
    if isinstance(strategy, AutoStrategy):
        return strategy
    return AutoStrategy() if isinstance(strategy, str) and strategy.lower() == "auto" else None
