"""``trainmesh project --sync_every ...``: replica groups that meet every H steps (LocalSGD, DiLoCo:
``FaultTolerance(sync=..., sync_every=H)``) against ddp's all-reduce at every step, on a link.

The model, per replica group (one device each) and step:
- ddp: the gradient all-reduce of ``projection.step_collectives("ddp", ...)`` (DDP's buckets), hidden
  behind compute by ``overlap`` (``step_seconds``);
- LocalSGD / DiLoCo: one all-reduce of the parameter bytes (the weights, or the pseudo-gradients:
  the same size) every H steps, between two steps, so nothing hides it: compute + sync / H. Both
  modes send the same bytes; they differ in what the average does to convergence, which this
  arithmetic does not model (``benchmarks/semi_sync.py`` measures the loss).

Efficiency is compute / step time: the share of the step spent computing. The crossovers, per link
and number of groups: the smallest H from which a semi-synchronous step is shorter than ddp's, and
the smallest H from which its efficiency reaches ``target``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainmesh.scaling.projection import Collective, Link, ModelFacts, step_collectives, step_seconds

DEFAULT_SYNC_EVERY = (1, 10, 100)
DEFAULT_GROUPS = (2, 4, 8)
TARGET_EFFICIENCY = 0.9


@dataclass(frozen=True)
class SemiSyncRow:
    """One mode on ``groups`` replica groups: per step (a sync's cost spread over its H steps)."""

    mode: str  # "ddp" or "local_sgd/diloco"
    sync_every: int  # 1 for ddp
    groups: int
    compute_ms: float
    comm_ms: float
    step_ms: float
    mb_sent_per_step: float  # per group, both directions alike
    efficiency: float


def sync_collective(facts: ModelFacts, groups: int) -> Collective:
    """A LocalSGD / DiLoCo sync: the parameter bytes all-reduced once over the groups."""
    return Collective("all_reduce", facts.parameter_bytes, groups, 1, "weights or pseudo-gradients")


def semi_sync_rows(
    facts: ModelFacts,
    *,
    compute_s: float,
    link: Link,
    groups: int,
    sync_every: tuple[int, ...] = DEFAULT_SYNC_EVERY,
    overlap: float = 0.0,
    algorithm: str = "nccl",
) -> list[SemiSyncRow]:
    """ddp's row, then one LocalSGD/DiLoCo row per H, on ``groups`` groups over ``link``.

    >>> from trainmesh.scaling.projection import LINKS, facts_from_count
    >>> rows = semi_sync_rows(facts_from_count(10**8), compute_s=0.1, link=LINKS["cross-region"], groups=2)
    >>> [(row.sync_every, round(row.step_ms)) for row in rows]
    [(1, 2020), (1, 520), (10, 142), (100, 104)]
    """
    ddp = step_collectives("ddp", groups, facts)
    comm = sum(c.seconds(link, algorithm) for c in ddp)
    rows = [_row("ddp", 1, groups, compute_s, comm, step_seconds(compute_s, comm, overlap), ddp)]
    sync = sync_collective(facts, groups)
    for every in sync_every:
        if every < 1:
            raise ValueError(f"sync_every={every}: the local steps between two syncs are a whole number >= 1")
        spread = sync.seconds(link, algorithm) / every
        rows.append(_row("local_sgd/diloco", every, groups, compute_s, spread, compute_s + spread, [sync], every))
    return rows


def _row(
    mode: str, every: int, groups: int, compute: float, comm: float, step: float, sent: list[Collective], per: int = 1
) -> SemiSyncRow:
    mb = sum(c.bytes_sent() for c in sent) / per / 1e6
    return SemiSyncRow(mode, every, groups, compute * 1e3, comm * 1e3, step * 1e3, mb, compute / step)


@dataclass(frozen=True)
class Crossover:
    """From which H LocalSGD/DiLoCo's step is shorter than ddp's (None: ddp's step is the compute
    alone, nothing is shorter), and from which H its efficiency reaches ``target``."""

    groups: int
    ddp_efficiency: float
    beats_ddp_from: int | None
    reaches_target_from: int
    target: float


def crossover(
    facts: ModelFacts,
    *,
    compute_s: float,
    link: Link,
    groups: int,
    overlap: float = 0.0,
    algorithm: str = "nccl",
    target: float = TARGET_EFFICIENCY,
) -> Crossover:
    """compute + sync/H < ddp's step  <=>  H > sync / (ddp's step - compute);
    compute / (compute + sync/H) >= target  <=>  H >= sync x target / (compute x (1 - target)).

    >>> from trainmesh.scaling.projection import LINKS, facts_from_count
    >>> crossover(facts_from_count(10**8), compute_s=0.1, link=LINKS["cross-region"], groups=2)
    Crossover(groups=2, ddp_efficiency=0.04950495049504951, beats_ddp_from=1, reaches_target_from=38, target=0.9)
    """
    if not 0 < target < 1:
        raise ValueError(f"target={target}: an efficiency between 0 and 1")
    ddp = step_collectives("ddp", groups, facts)
    ddp_step = step_seconds(compute_s, sum(c.seconds(link, algorithm) for c in ddp), overlap)
    sync = sync_collective(facts, groups).seconds(link, algorithm)
    beats = None if ddp_step <= compute_s else math.floor(sync / (ddp_step - compute_s)) + 1
    reaches = max(1, math.ceil(sync * target / (compute_s * (1 - target)) - 1e-9))
    return Crossover(groups, compute_s / ddp_step, beats, reaches, target)


def parse_counts(text: str, what: str) -> tuple[int, ...]:
    """``"1,10,100"`` as (1, 10, 100); each a whole number >= 1."""
    try:
        counts = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise ValueError(f"{what} {text!r}: give whole numbers like 1,10,100") from None
    if any(n < 1 for n in counts):
        raise ValueError(f"{what} {text!r}: each must be >= 1")
    return counts


def format_semi_sync(title: str, rows: list[SemiSyncRow], crossings: list[Crossover]) -> str:
    """A table of every mode's step time and efficiency per number of groups, then the crossovers."""
    groups = sorted({row.groups for row in rows})
    header = ["mode", "H", "MB/step"] + [f"N={n} step ms / eff" for n in groups]
    cells = [header]
    for key in dict.fromkeys((row.mode, row.sync_every) for row in rows):
        mine = {row.groups: row for row in rows if (row.mode, row.sync_every) == key}
        first = mine[groups[0]]
        cells.append(
            [key[0], str(key[1]), f"{first.mb_sent_per_step:.4g}"]
            + [f"{mine[n].step_ms:.4g} / {mine[n].efficiency:.2f}" for n in groups]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    for c in crossings:
        beats = "never (ddp's step is its compute)" if c.beats_ddp_from is None else f"H >= {c.beats_ddp_from}"
        lines.append(
            f"N={c.groups}: ddp's efficiency {c.ddp_efficiency:.2f}; LocalSGD/DiLoCo's step is shorter than ddp's "
            f"from {beats}; its efficiency reaches {c.target:g} from H >= {c.reaches_target_from}"
        )
    return "\n".join([title, *lines])
