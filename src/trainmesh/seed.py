"""Seeding and the capture/restore of every random number generator a training run uses."""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from trainmesh.launchers.agent_link import said_by_the_agent_process
from trainmesh.utilities.lightning_loggers import FABRIC_TOPS, lightning_named_logger
from trainmesh.utilities.rank_zero import rank_prefixed_message, rank_zero_warn

# Lightning logs "Seed set to N" from lightning.fabric.utilities.seed: a program's level on
# ``lightning.fabric`` (or that module's logger) silences it, one on ``lightning.pytorch`` does not
_log = lightning_named_logger("trainmesh.utilities.seed", tops=FABRIC_TOPS)


@dataclass(frozen=True)
class SeedSettings:
    """What the last :func:`seed_everything` in this process asked for.

    A :class:`~trainmesh.Runtime` captures it when it is built and carries it to the processes
    it starts, and hands the seed to its strategy (a distributed sampler shuffles with it) and
    the ``workers`` choice to its data loaders: passed explicitly, never through the
    environment.
    """

    seed: int
    workers: bool = False


_settings: SeedSettings | None = None  # this process's last seed_everything call
_env_at_last_seed: str | None = None  # PL_GLOBAL_SEED as that call found it (changed since: the program's)


def seed_settings() -> SeedSettings | None:
    """The settings of this process's last :func:`seed_everything` call; None if it made none.

    >>> seed_everything(3, workers=True)
    3
    >>> seed_settings()
    SeedSettings(seed=3, workers=True)
    """
    return _settings


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed Python's ``random``, NumPy and torch (all devices) with one number.

    With ``workers=True`` the Runtime gives every DataLoader with workers (and no
    ``worker_init_fn`` of its own) :func:`seed_worker`, so each worker of each process draws
    its own reproducible random numbers. ``seed=None`` takes this process's last seed (which Lightning's
    ``PL_GLOBAL_SEED`` holds), else reads ``PL_GLOBAL_SEED``, and without it means 0
    (with a warning), as in Lightning 2: every process of a run, however started, must agree on the
    seed. As Lightning's, it sets ``PL_GLOBAL_SEED`` and ``PL_SEED_WORKERS`` (``"0"``/``"1"``) in
    ``os.environ``; the processes trainmesh starts get the seed explicitly as well.

    Args:
        seed: the seed; anything ``int()`` takes (None: this process's last seed, else ``PL_GLOBAL_SEED``, else 0, said on stderr) (default ``None``).
        workers: also seed each DataLoader worker from the seed, rank, worker and epoch (default ``False``).
        verbose: log "Seed set to N" at INFO (logger ``trainmesh.utilities.seed``, governed by a program's levels on ``lightning.fabric``/``lightning.fabric.utilities.seed`` as Lightning's), prefixed
            "[rank: N] " in a process whose environment gives its rank (default ``True``).

    Examples:
        >>> seed_everything(7)
        7
    """
    global _settings, _env_at_last_seed
    seed = _chosen_seed(seed, verbose)
    _settings = SeedSettings(seed=seed, workers=bool(workers))
    # Lightning's: the seed and the workers flag in this process's environment (programs read them, and
    # processes started after inherit them); trainmesh's launchers still hand the seed over explicitly
    from trainmesh.launchers.environments import publish_seed  # the environment's one writer

    _env_at_last_seed = publish_seed(seed, workers=bool(workers))
    if verbose and not said_by_the_agent_process():
        # Lightning's: "[rank: N] " where the process's environment names its rank (a process a launcher
        # started; the one the user started, before any launch, has none)
        _log.info(rank_prefixed_message(f"Seed set to {seed}", _rank_in_environment()))
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is optional for torch itself
        pass
    return seed


def _chosen_seed(seed: Any, verbose: bool) -> int:
    """Lightning's rule: None reads ``PL_GLOBAL_SEED`` (a seed this process chose before comes first: Lightning wrote it there; unset: 0, said), anything ``int()`` takes is
    taken (a NumPy integer, a string of digits); the seed must fit NumPy's 32 bits."""
    if seed is None:
        from_env = os.environ.get("PL_GLOBAL_SEED")
        if _settings is not None and from_env == _env_at_last_seed:
            # seed_everything wrote its seed into PL_GLOBAL_SEED, as Lightning's, so a later call without
            # one (LightningCLI's default ``seed_everything: true`` after the program's own
            # ``seed_everything(42)``) takes it again (a variable the program changed since is read)
            return _settings.seed
        if from_env is None:
            if verbose:
                rank_zero_warn("seed_everything(): no seed given, so the seed is 0; pass one to choose it")
            return 0
        try:
            seed = int(from_env)
        except ValueError:
            raise ValueError(
                f"seed_everything(): PL_GLOBAL_SEED={from_env!r} is not an integer; set it to one, or pass the seed"
            ) from None
    try:
        value = int(seed)
    except (TypeError, ValueError):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}") from None
    if not 0 <= value < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return value


def seed_in_effect(captured: SeedSettings | None) -> SeedSettings | None:
    """The seed Lightning's readers of ``PL_GLOBAL_SEED`` take (its distributed sampler, 2.6's and 1.9.5's
    ``_get_distributed_sampler``; its strategies' ``reset_seed``): this process's last
    :func:`seed_everything`'s, which Lightning's wrote there; None where the program set or removed the
    variable since (the variable is then read as it is); a process that never called one: ``captured``
    (a Runtime's, carried to the processes it starts)."""
    if _settings is None:
        return captured
    return _settings if os.environ.get("PL_GLOBAL_SEED") == _env_at_last_seed else None


def sampler_seed(captured: SeedSettings | None) -> int:
    """The seed a distributed sampler shuffles with: :func:`seed_in_effect`'s, else the variable
    (:func:`env_seed`: its number, or 0 where unset)."""
    settings = seed_in_effect(captured)
    return settings.seed if settings is not None else env_seed()


def env_seed() -> int:
    """The seed a process that never called :func:`seed_everything` shuffles with: ``PL_GLOBAL_SEED``
    where set (Lightning's sampler reads it), else 0."""
    try:
        return int(os.environ.get("PL_GLOBAL_SEED", 0))
    except ValueError:
        return 0


def seed_worker(worker_id: int, *, rank: int) -> None:
    """A DataLoader ``worker_init_fn``: seed the worker's torch, ``random`` and NumPy from the
    loader's base seed, the worker id and the process rank, as Lightning 2.6's
    ``pl_worker_init_function`` does (the same numbers in the worker). The Runtime passes
    ``functools.partial(seed_worker, rank=rank)``.
    """
    # torch starts each worker with torch.manual_seed(base_seed + worker_id), base_seed drawn from
    # the loader's generator when its iterator starts: new every epoch (augmentations differ between
    # epochs), and the run's seed through seed_everything (a process trainmesh starts is seeded again
    # with it, as Lightning's reset_seed). The rank sets the processes apart.
    base_seed = torch.initial_seed() - worker_id
    seeds = _seed_sequence(base_seed, worker_id, rank, count=4)
    torch.manual_seed(seeds[0])
    random.seed((seeds[1] << 32) | seeds[2])
    try:
        import numpy as np

        np.random.seed(np.random.SeedSequence([base_seed, worker_id, rank]).generate_state(4))
    except ImportError:
        pass


def _seed_sequence(base_seed: int, worker_id: int, rank: int, count: int) -> list[int]:
    """Lightning 2.6's ``_generate_seed_sequence``: the three numbers mixed into 64 bits (MurmurHash3's
    finalizer), then ``count`` steps of Knuth's 64-bit linear congruential generator."""
    mask = (1 << 64) - 1
    mixed = (base_seed << 32) | (worker_id << 16) | rank
    mixed ^= mixed >> 33
    mixed = (mixed * 0xFF51AFD7ED558CCD) & mask
    mixed ^= mixed >> 33
    mixed = (mixed * 0xC4CEB9FE1A85EC53) & mask
    mixed ^= mixed >> 33
    seeds = []
    for _ in range(count):
        mixed = (mixed * 6364136223846793005 + 1) & mask
        seeds.append(mixed)
    return seeds


def capture_rng_state() -> dict[str, Any]:
    """Every global generator's state, for a checkpoint."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        # The key array as a tensor: a checkpoint then holds only what
        # torch.load(weights_only=True) reads (no numpy object).
        name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
        state["numpy"] = (
            name,
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            position,
            has_gauss,
            cached_gaussian,
        )
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put every global generator back where :func:`capture_rng_state` found it."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        name, keys, position, has_gauss, cached_gaussian = state["numpy"]
        if isinstance(keys, torch.Tensor):  # else an ndarray: a checkpoint written before the tensor form
            keys = keys.numpy().astype(np.uint32)
        np.random.set_state((name, keys, position, has_gauss, cached_gaussian))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Every global generator (Python's, NumPy's, torch's, CUDA's once initialized unless
    ``include_cuda=False``) as it was on entry when the block ends, as Lightning's
    ``isolate_rng`` (which the sanity check runs in). A block that raises leaves them where it
    left them, as both owners' (pytorch-lightning 1.9.5's and Lightning 2.6's restore after a
    bare ``yield``): a program that catches a failed fit and draws on sees the owners' numbers.

    >>> import torch
    >>> with isolate_rng():
    ...     drawn = torch.rand(1)
    >>> bool(torch.equal(drawn, torch.rand(1)))
    True
    """
    state = capture_rng_state()
    if not include_cuda:
        state.pop("cuda", None)
    yield
    restore_rng_state(state)


def import_leaving_rng(name: str) -> ModuleType:
    """Import ``name`` without moving any global generator.

    trainmesh imports its optional dependencies where they are used, that is after the user's
    ``seed_everything``; one that draws at import time would shift every number the user's
    program draws after it (rich does: ``rich.style`` takes ``random.getrandbits(24)``, so the
    first progress bar changed a seeded run's results). Imported once, a module draws no more.
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    with isolate_rng():
        return importlib.import_module(name)


def make_deterministic() -> None:
    """``Trainer(deterministic=True)``: torch's deterministic algorithms, and the fixed cuBLAS
    workspace they need (set by the launchers, which own the environment)."""
    # Imported here: the launchers import this module (spawn carries the RNG states), and the
    # progress bar imports it early for import_leaving_rng.
    from trainmesh.launchers.environments import require_deterministic_cublas

    torch.use_deterministic_algorithms(True)
    require_deterministic_cublas()


def _rank_in_environment() -> int | None:
    """Lightning's ``_get_rank``: the first of these variables set, else None (no launcher started this process)."""
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        value = os.environ.get(name)
        if value is not None:
            return int(value)
    return None
