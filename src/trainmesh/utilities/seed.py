"""Lightning's ``utilities.seed`` names: ``isolate_rng`` restores every RNG when its block ends; and
pytorch-lightning 1.9.5's, which 2.0 removed: ``seed_everything``, ``reset_seed`` (the last
``seed_everything`` again), ``pl_worker_init_function`` (1.9.5's seeding of a DataLoader worker), each with
1.9.5's deprecation line (1.8 deprecated them here), and their silent ``new_*`` aliases."""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Callable
from typing import Any

import torch

from trainmesh.seed import isolate_rng, seed_settings
from trainmesh.seed import seed_everything as new_seed_everything
from trainmesh.utilities.refusal import LightningOneName

__all__ = [
    "isolate_rng",
    "new_pl_worker_init_function",
    "new_reset_seed",
    "new_seed_everything",
    "pl_worker_init_function",
    "reset_seed",
    "seed_everything",
]


def new_reset_seed() -> None:
    """Seed again with the last :func:`seed_everything`'s seed and ``workers`` (nothing without one).

    Examples:
        >>> _ = new_seed_everything(5)
        >>> first = torch.rand(1)
        >>> new_reset_seed()
        >>> bool(torch.rand(1) == first)
        True
    """
    settings = seed_settings()
    if settings is not None:
        new_seed_everything(settings.seed, workers=settings.workers)


def new_pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a DataLoader worker's NumPy, torch and ``random`` from torch's seed of the worker, its id and
    the process rank, as pytorch-lightning 1.9.5's ``worker_init_fn`` does (NumPy's ``SeedSequence``).

    Args:
        worker_id: the worker's id.
        rank: the process's global rank (default ``None``: 0).

    Examples:
        >>> new_pl_worker_init_function(0, rank=0)
    """
    import numpy as np

    base_seed = torch.initial_seed() - worker_id
    sequence = np.random.SeedSequence([base_seed, worker_id, rank or 0])
    np.random.seed(sequence.generate_state(4))
    torch_sequence, stdlib_sequence = sequence.spawn(2)
    torch.manual_seed(int(torch_sequence.generate_state(1, dtype=np.uint64)[0]))
    random.seed(int((stdlib_sequence.generate_state(2, dtype=np.uint64).astype(object) * [1 << 64, 1]).sum()))


def _deprecated(name: str, new: Callable[..., Any], today: str) -> Callable[..., Any]:
    """1.9.5's ``utilities.seed.name``: ``new`` after 1.9.5's deprecation line (a ``LightningOneName``, a
    ``FutureWarning``), pointing at the program's line."""

    @functools.wraps(new)
    def old(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"trainmesh.utilities.seed.{name} is pytorch-lightning 1.x's name (1.8 deprecated it, 2.0 removed it); "
            f"today: {today} (Lightning 2.x: lightning.fabric.utilities.seed.{name})",
            LightningOneName,
            stacklevel=2,
        )
        return new(*args, **kwargs)

    old.__name__ = old.__qualname__ = name
    return old


seed_everything = _deprecated("seed_everything", new_seed_everything, "trainmesh.seed_everything")
reset_seed = _deprecated("reset_seed", new_reset_seed, "trainmesh.utilities.seed.new_reset_seed")
pl_worker_init_function = _deprecated(
    "pl_worker_init_function", new_pl_worker_init_function, "trainmesh.utilities.seed.new_pl_worker_init_function"
)
