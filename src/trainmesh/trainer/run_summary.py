"""The start line: what a stage runs on, printed once by rank 0 when fit/validate/test/predict begins.

Nothing else tells the user how many processes ran, how the mesh divides them, or what batch
the optimizer really sees, and those are what a scaling analysis compares between runs.
``enable_model_summary=False`` turns it off together with the layer table: both are what a
run says about itself when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.dtensors import count_fsdp_units
from trainmesh.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_state import LoopState


def format_run_summary(
    *,
    stage: str,
    strategy: str,
    processes: int,
    nodes: int,
    mesh_sizes: Mapping[str, int],
    device: str,
    precision: str,
    batch_size: int | None,
    dp_size: int,
    accumulation: int = 1,
    shard_units: int = 0,
) -> str:
    """One line saying what ``stage`` runs on; ``mesh_sizes`` lists the axes that divide anything.

    The global batch is what one optimizer step sees: each data-parallel rank reads its own
    batch, and pipeline or tensor ranks of one data-parallel rank share it. ``shard_units``:
    FSDP's units (the root included; 0 where nothing is sharded), each gathered whole only
    while it runs: 1 means every parameter is gathered at once.

    >>> format_run_summary(stage="fit", strategy="fsdp", processes=4, nodes=1, mesh_sizes={"pp": 2, "dp_shard": 2},
    ...                    device="cpu", precision="32-true", batch_size=8, dp_size=2, accumulation=3, shard_units=9)
    'trainmesh fit: strategy fsdp (9 shard units), 4 processes (4 per node x 1 node), mesh pp=2 x dp_shard=2, device cpu, precision 32-true, global batch 48 (8 per rank x 2 data-parallel x 3 accumulated)'
    """
    if processes == 1:
        where = "1 process"
    else:
        where = f"{processes} processes ({processes // nodes} per node x {nodes} node{'s' if nodes != 1 else ''})"
    mesh = " x ".join(f"{axis}={size}" for axis, size in mesh_sizes.items()) or "none"
    if shard_units:
        strategy = f"{strategy} ({shard_units} shard unit{'s' if shard_units != 1 else ''})"
    if batch_size is None:
        # An iterable with no batch_size (a generator, a custom loader): say so rather than guess.
        batch = f"batch size unknown ({dp_size} data-parallel x {accumulation} accumulated)"
    else:
        batch = (
            f"global batch {batch_size * dp_size * accumulation} "
            f"({batch_size} per rank x {dp_size} data-parallel x {accumulation} accumulated)"
        )
    return (
        f"trainmesh {stage}: strategy {strategy}, {where}, mesh {mesh}, device {device}, precision {precision}, {batch}"
    )


def loader_batch_size(loader: Any) -> int | None:
    """The per-rank batch size of a loader, or None where it has none to tell.

    >>> from torch.utils.data import DataLoader
    >>> loader_batch_size(DataLoader(range(10), batch_size=4))
    4
    """
    # The Runtime's device loader and the strategies' wrappers (equal-length evaluation shards) keep
    # what they wrap as ``.loader``; a DataLoader whose batch sampler was replaced (a shard) has
    # batch_size None and a batch sampler that keeps the original as ``.batch_sampler``. Only
    # attributes are read, never len(): on a padded shard that is a collective.
    for _ in range(8):
        size = getattr(loader, "batch_size", None)
        if isinstance(size, int):
            return size
        inner = getattr(loader, "loader", None)  # not `or`: truth-testing calls len()
        loader = inner if inner is not None else getattr(loader, "batch_sampler", None)
        if loader is None:
            return None
    return None


def announce_run(
    trainer: TrainerView, state: LoopState, runtime: Runtime, stage: str, loader: Any, *, accumulation: int = 1
) -> None:
    """Print the start line for ``stage`` on rank 0, unless the model summary is turned off."""
    if not trainer.is_global_zero or not any(
        type(cb).__name__ in ("ModelSummary", "RichModelSummary") for cb in trainer.callbacks
    ):
        return
    dims = runtime.mesh.dims
    rank_zero_info(
        format_run_summary(
            stage=stage,
            strategy=runtime.strategy_name,
            processes=runtime.world_size,
            nodes=runtime.num_nodes,
            mesh_sizes={axis: getattr(dims, axis) for axis in dims.used_axes()},
            device=runtime.device_type,
            precision=runtime.precision.name,
            batch_size=loader_batch_size(loader),
            dp_size=runtime.mesh.dp_size,
            accumulation=accumulation,
            shard_units=count_shard_units(state.model),
        )
    )


def count_shard_units(model: Any) -> int:
    """FSDP2 units in the set-up model, the root included; 0 where nothing is sharded.

    >>> import torch
    >>> count_shard_units(torch.nn.Linear(2, 2))
    0
    """
    return count_fsdp_units(model)
