"""Lightning's ``utilities.seed`` names: ``isolate_rng`` restores every RNG when its block ends; and
pytorch-lightning 1.9.5's, which 2.0 removed: ``reset_seed`` (the last ``seed_everything`` again),
``pl_worker_init_function`` (1.9.5's seeding of a DataLoader worker) and their ``new_*`` aliases."""

from __future__ import annotations

import random

import torch

from trainmesh.seed import isolate_rng, seed_everything, seed_settings

__all__ = [
    "isolate_rng",
    "new_pl_worker_init_function",
    "new_reset_seed",
    "new_seed_everything",
    "pl_worker_init_function",
    "reset_seed",
    "seed_everything",
]


def reset_seed() -> None:
    """Seed again with the last :func:`seed_everything`'s seed and ``workers`` (nothing without one).

    Examples:
        >>> _ = seed_everything(5)
        >>> first = torch.rand(1)
        >>> reset_seed()
        >>> bool(torch.rand(1) == first)
        True
    """
    settings = seed_settings()
    if settings is not None:
        seed_everything(settings.seed, workers=settings.workers)


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a DataLoader worker's NumPy, torch and ``random`` from torch's seed of the worker, its id and
    the process rank, as pytorch-lightning 1.9.5's ``worker_init_fn`` does (NumPy's ``SeedSequence``).

    Args:
        worker_id: the worker's id.
        rank: the process's global rank (default ``None``: 0).

    Examples:
        >>> pl_worker_init_function(0, rank=0)
    """
    import numpy as np

    base_seed = torch.initial_seed() - worker_id
    sequence = np.random.SeedSequence([base_seed, worker_id, rank or 0])
    np.random.seed(sequence.generate_state(4))
    torch_sequence, stdlib_sequence = sequence.spawn(2)
    torch.manual_seed(int(torch_sequence.generate_state(1, dtype=np.uint64)[0]))
    random.seed(int((stdlib_sequence.generate_state(2, dtype=np.uint64).astype(object) * [1 << 64, 1]).sum()))


# 1.9.5's names for Lightning Fabric's functions, the same here
new_seed_everything = seed_everything
new_reset_seed = reset_seed
new_pl_worker_init_function = pl_worker_init_function
