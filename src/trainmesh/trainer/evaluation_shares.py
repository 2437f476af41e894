"""What the evaluation loops need to know about the ranks' shares of an evaluation loader.

The Runtime splits each evaluation loader as Lightning 2.6's Trainer does (strategies/sampling.py):
validation and test padded so that every rank runs as many batches, predict unpadded (ranks may
run a batch fewer). This module warns as Lightning warns about the padding, evens out the step
counts where the strategy's step is a collective.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DistributedSampler

from trainmesh.trainer.loop_context import LoopContext
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning


def warn_replicated_samples(stage: str, given: list[Any], placed: list[Any]) -> None:
    """Lightning's warning, on its condition: in ``trainer.validate()`` / ``trainer.test()``, for
    each loader it gave a distributed sampler over more than one process (data_connector.py)."""
    for own, device_loader in zip(given, placed, strict=True):
        inner = getattr(device_loader, "loader", device_loader)
        if inner is own:
            continue  # read as it was given (one process, an iterable dataset, use_distributed_sampler=False)
        sampler = _share_sampler(inner)
        if sampler is None or sampler is _share_sampler(own) or sampler.num_replicas <= 1:
            continue
        rank_zero_warn(
            f"Using `DistributedSampler` with the dataloaders. During `trainer.{stage}()`, it is recommended to use "
            "`Trainer(devices=1, num_nodes=1)` to ensure each sample/batch gets evaluated exactly once. Otherwise, "
            "multi-device settings use `DistributedSampler` that replicates some samples to make sure all devices "
            "have same batch size in case of uneven inputs.",
            category=PossibleUserWarning,
        )


def _share_sampler(loader: Any) -> Any:
    """The distributed sampler that orders ``loader``'s samples (its own, or its batch sampler's)."""
    # Here, not at the top: a run on one process never splits a loader (tests/test_import.py).
    from trainmesh.utilities.distributed_samplers import DistributedSamplerWrapper

    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(sampler, (DistributedSampler, DistributedSamplerWrapper)):
            return sampler
    return None


def steps_owed(ctx: LoopContext, stage: str, limits: list[int | float]) -> int:
    """How many steps this rank runs after its last batch so that it ran as many as every other.

    Only where the strategy's evaluation step is a collective across the data-parallel ranks
    (FSDP2 gathers the sharded parameters around each forward: ``shards_parameters``): there a
    rank that ran fewer steps would leave the others waiting. Validation and test shares are
    padded to equal counts; predict's are not (a rank may hold a batch fewer): such a rank runs
    its last batch again, unseen by any hook, its output dropped. Unequal validation or test
    counts (a batch sampler of the user's own) are refused before the first step.
    """
    runtime = ctx.runtime
    total = sum(limits)
    if runtime.world_size == 1 or not runtime.capabilities.shards_parameters or total == float("inf"):
        return 0
    counts = runtime.all_reduce(torch.tensor([total, -total], device=runtime.device), "max")
    most, fewest = int(counts[0]), -int(counts[1])
    if most == fewest:
        return 0
    if stage != "predict":
        raise ValueError(
            f"the processes' {stage} loaders give different numbers of batches ({fewest} to {most}), but under "
            f"{runtime.strategy_name} every process must run as many evaluation steps as the others (each step "
            "gathers the sharded parameters from all of them). Use a batch sampler that gives every process as many "
            "batches, or torch's BatchSampler"
        )
    if fewest == 0:
        raise ValueError(
            f"a process has no sample to predict ({most} batches on another), but under {runtime.strategy_name} "
            "every process must run as many steps as the others (each step gathers the sharded parameters from all "
            "of them). Predict at least as many samples as there are processes, or predict on one process"
        )
    return int(most - total)
