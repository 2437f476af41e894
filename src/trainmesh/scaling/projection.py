"""Projection past this machine: what N devices on a given link would buy.

The model (an alpha-beta model of ring collectives, the textbook one NCCL's ring follows):

- one step = compute + the communication left exposed, where compute is measured (or given) per
  rank and does not change with N in weak scaling (per-rank batch fixed) and shrinks as 1/N in
  strong scaling (global batch fixed, compute taken as linear in the batch);
- a collective over g ranks on a buffer of M bytes sends, per rank, 2(g-1)/g x M (all-reduce) or
  (g-1)/g x M (all-gather, reduce-scatter) at the link's bandwidth B, and pays the link's latency
  once per ring step: 2(g-1) steps per all-reduce and g-1 per all-gather or reduce-scatter
  (``algorithm="tree"``: 2 ceil(log2 g) and ceil(log2 g); ``"nccl"``, the default: an all-reduce
  takes the fewer of the ring's and the tree's steps, as NCCL's tuner picks the faster of the two,
  and all-gathers and reduce-scatters the ring's, NCCL having no tree for them);
- ``overlap`` (0..1) is the share of the communication hidden behind compute, never more than
  the compute itself: step = compute + comm - min(overlap x comm, compute).

What each strategy sends per step (P: the trainable parameters' bytes as trained, counted as
``estimate_memory`` counts them; P_c: in the compute dtype, which FSDP gathers under a mixed
precision; G = P: gradients are reduced in the parameters' dtype, fp32 under a mixed precision):

- ddp: one all-reduce of G, in DDP's 25 MiB buckets (one latency each);
- zero1: ddp's all-reduce, then every updated parameter from the rank owning it (torch's
  ZeroRedundancyOptimizer broadcasts each parameter tensor: modelled as an all-gather of P with
  one latency per tensor);
- sharded (ZeRO-2): an all-gather of P_c before forward and a reduce-scatter of G, per shard unit;
- fsdp (ZeRO-3): all-gathers of P_c before forward and again before backward, a reduce-scatter of G;
- hsdp: fsdp's collectives within a shard group of S ranks, and an all-reduce of G / S across
  the N / S groups.

Not modelled: tensor and pipeline parallelism (their traffic is activations, whose sizes depend on
the layer plan), the optimizer step's own time beyond the measured compute, congestion between
jobs, and stragglers.

>>> facts = ModelFacts(parameters=1_000_000, parameter_bytes=4_000_000, gathered_bytes=4_000_000, tensors=4, units=3)
>>> [round(c.bytes_sent()) for c in step_collectives("ddp", 4, facts)]
[6000000]
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from dataclasses import dataclass

from trainmesh.scaling.analysis import PAYS_EFFICIENCY, Measurement
from trainmesh.strategies.capabilities import SHARD_GROUP, WHOLE, MemoryModel

DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel's default bucket_cap_mb
# Measured over modelled beyond this factor (either way) at a measured N: the calibration warns.
CALIBRATION_BOUND = 1.5
PROJECTED_PROCESSES = tuple(2**i for i in range(3, 11))  # 8 ... 1024
ALGORITHMS = ("nccl", "ring", "tree")


def modelled() -> dict[str, MemoryModel]:
    """The named strategies whose step's collectives the projection models, with the memory model
    they follow from (each strategy's ``capabilities.communication_model``): ddp, zero1, sharded,
    fsdp, hsdp and ddp's start methods."""
    from trainmesh.strategies import stated_capabilities

    stated = stated_capabilities().items()
    return {name: caps.memory_model for name, caps in stated if caps.communication_model and caps.memory_model}


@dataclass(frozen=True)
class Link:
    """One device's link to the others: ``bandwidth`` in bytes/s per direction, ``latency`` in
    seconds per collective step."""

    name: str
    bandwidth: float
    latency: float
    description: str = ""

    def describe(self) -> str:
        return f"{self.name}: {self.bandwidth * 8 / 1e9:g} Gb/s per device, {self.latency * 1e6:g} us per step" + (
            f" ({self.description})" if self.description else ""
        )


# Stated figures, per device and direction; real collectives reach 80-90% of them.
LINKS = {
    "nvlink": Link("nvlink", 450e9, 2e-6, "NVLink 4 through NVSwitch, H100 SXM: 900 GB/s both ways; one NVLink domain"),
    "infiniband-ndr": Link("infiniband-ndr", 50e9, 5e-6, "InfiniBand NDR, one 400 Gb/s port per GPU"),
    "100gbe": Link("100gbe", 12.5e9, 20e-6, "100 Gb Ethernet (RoCE), one port per device"),
    "10gbe": Link("10gbe", 1.25e9, 50e-6, "10 Gb Ethernet (TCP) within a site"),
    "cross-region": Link("cross-region", 1.25e9, 50e-3, "10 Gb/s between regions or clouds, 20-80 ms: 50 ms"),
}

_BANDWIDTH_UNITS = {"b/s": 1 / 8, "bit/s": 1 / 8, "bps": 1 / 8, "B/s": 1.0}
_PREFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}  # divided by: 5 / 1e6 is exactly 5e-06


def parse_bandwidth(text: str) -> float:
    """Bytes per second from ``400Gb/s``, ``50GB/s``, ``100 Gbit/s`` (b: bits, B: bytes).

    >>> parse_bandwidth("400Gb/s"), parse_bandwidth("50GB/s")
    (50000000000.0, 50000000000.0)
    """
    match = re.fullmatch(r"\s*([0-9.]+(?:e[+-]?\d+)?)\s*([kKMGT]?)(b/s|bit/s|bps|B/s)\s*", text)
    if not match:
        raise ValueError(
            f"link bandwidth {text!r} not understood; write it like 400Gb/s (bits) or 50GB/s (bytes), "
            f"or name a preset: {', '.join(LINKS)}"
        )
    number, prefix, unit = match.groups()
    return float(number) * _PREFIXES[prefix] * _BANDWIDTH_UNITS[unit]


def parse_latency(text: str) -> float:
    """Seconds from ``5us``, ``1.5 ms``, ``800ns``.

    >>> parse_latency("5us")
    5e-06
    """
    match = re.fullmatch(r"\s*([0-9.]+(?:e[+-]?\d+)?)\s*(s|ms|us|µs|ns)\s*", text)
    if not match:
        raise ValueError(f"latency {text!r} not understood; write it like 5us, 2ms or 800ns")
    return float(match.group(1)) / _PER_SECOND[match.group(2)]


def resolve_link(link: str, latency: str | None = None) -> Link:
    """A preset by name (``latency`` overrides its figure) or a bandwidth with ``latency``.

    >>> resolve_link("400Gb/s", "5us")
    Link(name='400Gb/s', bandwidth=50000000000.0, latency=5e-06, description='')
    """
    preset = LINKS.get(link.lower())
    if preset is not None:
        return preset if latency is None else dataclasses.replace(preset, latency=parse_latency(latency))
    bandwidth = parse_bandwidth(link)
    if latency is None:
        raise ValueError(f"--link {link} needs --latency too (e.g. --latency 5us), or use a preset: {', '.join(LINKS)}")
    return Link(link, bandwidth, parse_latency(latency))


@dataclass(frozen=True)
class ModelFacts:
    """What the communication formulas need to know about a model (see the module docstring)."""

    parameters: int  # trainable
    parameter_bytes: int  # as trained: P (and G)
    gathered_bytes: int  # P_c: as FSDP gathers them
    tensors: int  # trainable parameter tensors (zero1's broadcasts)
    units: int  # FSDP shard units, the root included (one all-gather / reduce-scatter each)


def facts_from_count(parameters: int, precision: str = "32-true", *, layers: int = 12) -> ModelFacts:
    """Facts for a transformer of ``parameters`` parameters and ``layers`` layers, without the model:
    each layer a shard unit of 12 tensors (GPT-2's), plus embeddings, final norm and head.

    >>> facts_from_count(1000, "bf16-mixed", layers=2)
    ModelFacts(parameters=1000, parameter_bytes=4000, gathered_bytes=2000, tensors=28, units=5)
    """
    trained = {"bf16-true": 2, "16-true": 2, "64-true": 8}.get(precision, 4)  # mixed keeps fp32 weights
    gathered = 2 if precision in ("bf16-mixed", "16-mixed") else trained
    return ModelFacts(parameters, parameters * trained, parameters * gathered, 12 * layers + 4, layers + 3)


@dataclass(frozen=True)
class Collective:
    """``calls`` collectives of one ``kind`` over groups of ``ranks``, on ``size_bytes`` in all."""

    kind: str  # "all_reduce", "all_gather" or "reduce_scatter"
    size_bytes: float
    ranks: int
    calls: int
    what: str = ""

    def bytes_sent(self) -> float:
        """Bytes each rank sends (and receives): 2(g-1)/g x M for an all-reduce, (g-1)/g x M otherwise."""
        if self.ranks <= 1:
            return 0.0
        share = (self.ranks - 1) / self.ranks
        return (2 if self.kind == "all_reduce" else 1) * share * self.size_bytes

    def latency_steps(self, algorithm: str = "nccl") -> int:
        """Steps that each pay the link's latency, per call (see the module docstring)."""
        if self.ranks <= 1:
            return 0
        ring, tree = self.ranks - 1, math.ceil(math.log2(self.ranks))
        steps = {"ring": ring, "tree": tree, "nccl": min(ring, tree) if self.kind == "all_reduce" else ring}[algorithm]
        return (2 if self.kind == "all_reduce" else 1) * steps

    def seconds(self, link: Link, algorithm: str = "nccl") -> float:
        return self.calls * self.latency_steps(algorithm) * link.latency + self.bytes_sent() / link.bandwidth


def step_collectives(
    strategy: str, processes: int, facts: ModelFacts, *, shard_size: int = 8, bucket_bytes: int = DDP_BUCKET_BYTES
) -> list[Collective]:
    """The collectives one training step runs under ``strategy`` on ``processes`` ranks."""
    name, n, p, pc = strategy.lower(), processes, facts.parameter_bytes, facts.gathered_bytes
    models = modelled()
    if name not in models:
        raise ValueError(
            f"strategy={strategy!r} has no communication model; the projection models {', '.join(models)}. "
            "Tensor and pipeline parallelism send activations, whose sizes depend on the layer plan"
        )
    state = models[name]  # what each rank holds decides what it sends
    if state.parameters == WHOLE:  # replicas (ddp): gradients all-reduced
        grads = [Collective("all_reduce", p, n, max(1, math.ceil(p / bucket_bytes)), "gradients")]
        if state.optimizer_state != WHOLE:  # zero1: each updated parameter from the rank that owns it
            grads.append(Collective("all_gather", p, n, facts.tensors, "updated parameters"))
        return grads
    in_groups = state.parameters == SHARD_GROUP  # hsdp: sharded within groups, replicated across them
    group = min(shard_size, n) if in_groups else n
    if in_groups and n % group:
        raise ValueError(f"{name}'s shard group of {group} ranks does not divide N={n}")
    units = facts.units
    found = [Collective("all_gather", pc, group, units, "parameters before forward")]
    if not state.gathered_for_backward:  # fsdp reshards after forward and gathers again for backward
        found.append(Collective("all_gather", pc, group, units, "parameters before backward"))
    found.append(Collective("reduce_scatter", p, group, units, "gradients"))
    if in_groups and n > group:
        found.append(Collective("all_reduce", p / group, n // group, units, "gradient shards across groups"))
    return found


def step_seconds(compute_s: float, comm_s: float, overlap: float) -> float:
    """compute + comm - min(overlap x comm, compute): at most the compute can hide communication.

    >>> step_seconds(0.010, 0.004, 0.5), step_seconds(0.002, 0.010, 1.0)
    (0.012, 0.01)
    """
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap={overlap}: the share of communication hidden behind compute is 0..1")
    return compute_s + comm_s - min(overlap * comm_s, compute_s)


@dataclass(frozen=True)
class ProjectedRow:
    """One projected N: ``feasible`` is False where strong scaling leaves a rank no whole sample."""

    processes: int
    per_rank_batch: float
    compute_ms: float
    comm_ms: float
    step_ms: float
    mb_sent_per_rank: float
    samples_per_s: float
    speedup: float
    efficiency: float
    feasible: bool = True


def project(
    strategy: str,
    facts: ModelFacts,
    *,
    compute_s: float,
    batch: int,
    link: Link,
    overlap: float = 0.0,
    processes: tuple[int, ...] = PROJECTED_PROCESSES,
    mode: str = "weak",
    algorithm: str = "nccl",
    shard_size: int = 8,
) -> list[ProjectedRow]:
    """The projected rows for each N. ``compute_s``: one rank's step without communication on
    ``batch`` samples; ``batch`` is the per-rank batch (weak) or the global batch (strong).
    Speedup and efficiency are against that one device alone."""
    if mode not in ("weak", "strong") or algorithm not in ALGORITHMS:
        raise ValueError(f"mode={mode!r}, algorithm={algorithm!r}: use weak/strong and one of {ALGORITHMS}")
    rows = []
    for n in processes:
        rank_batch = batch if mode == "weak" else batch / n
        compute = compute_s * rank_batch / batch
        collectives = step_collectives(strategy, n, facts, shard_size=shard_size)
        comm = sum(c.seconds(link, algorithm) for c in collectives)
        step = step_seconds(compute, comm, overlap)
        speedup = (rank_batch * n / step) / (batch / compute_s)
        rows.append(
            ProjectedRow(
                processes=n,
                per_rank_batch=rank_batch,
                compute_ms=compute * 1e3,
                comm_ms=comm * 1e3,
                step_ms=step * 1e3,
                mb_sent_per_rank=sum(c.bytes_sent() for c in collectives) / 1e6,
                samples_per_s=rank_batch * n / step,
                speedup=speedup,
                efficiency=speedup / n,
                feasible=rank_batch >= 1 and float(rank_batch).is_integer(),
            )
        )
    return rows


def projected_verdict(rows: list[ProjectedRow]) -> str:
    """Where scaling stops paying: the largest N up to which every N keeps an efficiency of at
    least ``PAYS_EFFICIENCY`` and a rising throughput; and where the throughput peaks."""
    rows = [row for row in rows if row.feasible]
    if not rows:
        return "no N leaves every rank a whole sample: use a larger global batch."
    pays, previous = None, 0.0
    for row in rows:
        if row.efficiency < PAYS_EFFICIENCY or row.samples_per_s <= previous:
            break
        pays, previous = row, row.samples_per_s
    peak = max(rows, key=lambda row: row.samples_per_s)
    if pays is None:
        text = f"does not pay from N={rows[0].processes} (efficiency {rows[0].efficiency:.2f} < {PAYS_EFFICIENCY})"
    elif pays is rows[-1]:
        text = f"pays up to N={pays.processes}, the largest projected (efficiency {pays.efficiency:.2f})"
    else:
        text = f"pays up to N={pays.processes} (efficiency {pays.efficiency:.2f} >= {PAYS_EFFICIENCY})"
    return f"{text}; throughput peaks at N={peak.processes} ({peak.samples_per_s:,.0f} samples/s)."


def _figure(value: float) -> str:
    """Three significant figures, without an exponent for large values: 0.0123, 14.5, 1012."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


_HEADER = ("N", "batch/rank", "compute ms", "comm ms", "step ms", "MB/rank", "samples/s", "speedup", "efficiency")


def format_projection(title: str, rows: list[ProjectedRow]) -> str:
    """A plain-text table of projected rows under ``title``, and the verdict."""
    cells = [list(_HEADER)]
    for row in rows:
        if not row.feasible:
            cells.append([str(row.processes), f"{row.per_rank_batch:g}"] + ["-"] * (len(_HEADER) - 2))
            continue
        cells.append(
            [
                str(row.processes),
                f"{row.per_rank_batch:g}",
                _figure(row.compute_ms),
                _figure(row.comm_ms),
                _figure(row.step_ms),
                _figure(row.mb_sent_per_rank),
                f"{row.samples_per_s:,.0f}",
                f"{row.speedup:.1f}",
                f"{row.efficiency:.2f}",
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(_HEADER))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    return "\n".join([title, *lines, projected_verdict(rows)])


@dataclass(frozen=True)
class ProjectionSettings:
    """What a projection assumes beyond the model: the links, the overlap, the algorithm, the N."""

    links: tuple[Link, ...]
    overlap: float = 0.0
    algorithm: str = "nccl"
    processes: tuple[int, ...] = PROJECTED_PROCESSES
    shard_size: int = 8

    def describe(self) -> str:
        return (
            f"overlap {self.overlap:g} (share of communication hidden behind compute), {self.algorithm} "
            f"collectives, N = {', '.join(str(n) for n in self.processes)}"
            + (f", hsdp shard group {self.shard_size}" if self.shard_size != 8 else "")
        )


@dataclass(frozen=True)
class CalibrationRow:
    """A measured N beside the model's figure for it, on this machine's fitted link."""

    processes: int
    measured_ms: float
    modelled_ms: float
    compute_ms: float
    modelled_comm_ms: float
    measured_comm_ms: float


@dataclass(frozen=True)
class Calibration:
    """``link``: this machine's link as fitted at the smallest measured N above 1 (None when the
    synced step was no slower there: nothing to fit); ``compute_per_sample_s`` from the smallest N."""

    link: Link | None
    compute_per_sample_s: float
    rows: list[CalibrationRow]
    note: str


def calibrate(strategy: str, facts: ModelFacts, runs: list[Measurement], *, algorithm: str = "nccl") -> Calibration:
    """Fit the model's one free figure, this machine's bandwidth, on the smallest measured N > 1
    (its synced step minus its unsynced step is the communication the model must explain, with no
    overlap and no latency), then model every measured N with it: compute per sample from the
    smallest N, scaled to each N's per-rank batch, plus the modelled communication."""
    runs = sorted(runs, key=lambda run: run.processes)
    base = runs[0]
    # With one process the synced and unsynced steps are the same step: both are compute.
    base_compute = statistics.median(base.step_s if base.processes == 1 else base.no_sync_step_s)
    per_sample = base_compute / base.per_rank_batch
    fit = next((run for run in runs if run.processes > 1), None)
    link, note = None, "only N=1 measured: no communication to fit"
    if fit is not None:
        measured_comm = statistics.median(fit.step_s) - statistics.median(fit.no_sync_step_s)
        sent = sum(c.bytes_sent() for c in step_collectives(strategy, fit.processes, facts))
        if measured_comm > 0 and sent > 0:
            link = Link("this machine (fitted)", sent / measured_comm, 0.0)
            note = (
                f"link fitted at N={fit.processes}: {sent / 1e6:.3g} MB sent per rank in {measured_comm * 1e3:.3g} ms "
                f"= {link.bandwidth / 1e9:.3g} GB/s effective (latency and overlap folded in)"
            )
        else:
            note = f"at N={fit.processes} the synced step was no slower than the unsynced one: nothing to fit"
    rows = []
    for run in runs:
        compute = per_sample * run.per_rank_batch
        comm = (
            0.0
            if link is None
            else sum(c.seconds(link, algorithm) for c in step_collectives(strategy, run.processes, facts))
        )
        measured = statistics.median(run.step_s)
        measured_comm = max(0.0, measured - statistics.median(run.no_sync_step_s)) if run.processes > 1 else 0.0
        rows.append(
            CalibrationRow(
                run.processes, measured * 1e3, (compute + comm) * 1e3, compute * 1e3, comm * 1e3, measured_comm * 1e3
            )
        )
    return Calibration(link, per_sample, rows, note)


def format_calibration(strategy: str, calibration: Calibration) -> str:
    """Measured against modelled step time for each measured N, with what was fitted."""
    cells = [
        ["N", "measured ms", "modelled ms", "measured/modelled", "compute ms", "comm ms model", "comm ms measured"]
    ]
    for row in calibration.rows:
        cells.append(
            [
                str(row.processes),
                f"{row.measured_ms:.3g}",
                f"{row.modelled_ms:.3g}",
                f"{row.measured_ms / row.modelled_ms:.2f}",
                f"{row.compute_ms:.3g}",
                f"{row.modelled_comm_ms:.3g}",
                f"{row.measured_comm_ms:.3g}",
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    title = f"calibration ({strategy} on this machine; {calibration.note})"
    off = [
        row
        for row in calibration.rows
        if not 1 / CALIBRATION_BOUND <= row.measured_ms / row.modelled_ms <= CALIBRATION_BOUND
    ]
    if off:
        # No confident projection from a model that does not explain what was measured here.
        worst = max(off, key=lambda row: abs(math.log(row.measured_ms / row.modelled_ms)))
        lines.append(
            f"warning: the model misses N={worst.processes} by {worst.measured_ms / worst.modelled_ms:.2f}x: the "
            "smallest N's compute is not each rank's compute at the others (threads, contention, noise); the "
            "projection below starts from that compute: fix the measurement before trusting it"
        )
    return "\n".join([title, *lines])
