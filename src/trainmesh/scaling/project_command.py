"""``trainmesh project`` (and ``trainmesh scale --link ...``): the projection past this machine on
the command line, its tables, its calibration against a sweep, and ``projection.json``.

trainmesh project --parameters 117e6 --layers 12 --precision bf16-mixed --compute_ms 14.5 --batch 8
trainmesh project --model my_pkg.models:GPT --batch_shape 8,1024 --flops_per_step 5.7e12 --peak_flops 989e12
trainmesh scale --max_processes 2 --link infiniband-ndr --link 100gbe --overlap 0.5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from trainmesh.scaling.analysis import Measurement
from trainmesh.scaling.plot import PlotSeries
from trainmesh.scaling.projection import (
    ALGORITHMS,
    LINKS,
    PROJECTED_PROCESSES,
    Link,
    ModelFacts,
    ProjectionSettings,
    calibrate,
    facts_from_count,
    format_calibration,
    format_projection,
    project,
    projected_verdict,
    resolve_link,
)
from trainmesh.scaling.summaries import PROJECT_SUMMARY
from trainmesh.utilities.command_parser import command_parser

SUMMARY = PROJECT_SUMMARY
DEFAULT_LINKS = ["infiniband-ndr", "100gbe"]


def add_link_arguments(parser: argparse.ArgumentParser, *, default_links: list[str]) -> None:
    """The link, overlap and N options that ``scale`` and ``project`` share."""
    presets = ", ".join(
        f"{name} ({link.bandwidth * 8 / 1e9:g} Gb/s, {link.latency * 1e6:g} us)" for name, link in LINKS.items()
    )
    group = parser.add_argument_group("projection past this machine")
    group.add_argument(
        "--link",
        action="append",
        default=[],
        help=f"A device's link: a preset ({presets}) or a bandwidth like 400Gb/s or 50GB/s; repeatable"
        + (f" (default: {', '.join(default_links)})." if default_links else "; without it, no projection."),
    )
    group.add_argument(
        "--latency", help="Per-step latency of a --link given as a bandwidth, e.g. 5us (overrides a preset's)."
    )
    group.add_argument(
        "--overlap", type=float, default=0.0, help="Share of communication hidden behind compute, 0..1 (default 0)."
    )
    group.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default="nccl",
        help="Latency steps per collective: ring (N-1 per pass), tree (log2 N), or nccl (default: the fewer of "
        "the two for all-reduce, as NCCL picks; ring for all-gather and reduce-scatter).",
    )
    group.add_argument(
        "--projected_processes",
        "--projected-processes",
        default=",".join(str(n) for n in PROJECTED_PROCESSES),
        help="Comma-separated N to project (default 8,16,...,1024).",
    )
    group.add_argument(
        "--shard_size", "--shard-size", type=int, default=8, help="hsdp's shard group (default 8, one node)."
    )


def projection_settings(options: argparse.Namespace, default_links: list[str]) -> ProjectionSettings | None:
    """The settings the options describe; None when no link is asked for."""
    names = options.link or default_links
    if not names:
        return None
    try:
        processes = tuple(int(n) for n in options.projected_processes.split(","))
    except ValueError:
        raise ValueError(f"--projected_processes {options.projected_processes!r}: give counts like 8,16,32") from None
    if any(n < 1 for n in processes) or not 0 <= options.overlap <= 1:
        raise ValueError("--projected_processes must be positive counts and --overlap a share between 0 and 1")
    return ProjectionSettings(
        tuple(resolve_link(name, options.latency) for name in names),
        overlap=options.overlap,
        algorithm=options.algorithm,
        processes=processes,
        shard_size=options.shard_size,
    )


def facts_from_model(model: Any, precision: str) -> ModelFacts:
    """The model's parameters counted as ``estimate_memory`` counts them, and its FSDP shard units
    as the fsdp strategy would choose them (plus the root)."""
    from trainmesh.memory_estimate import trained_parameter_bytes
    from trainmesh.strategies.shard_units import shard_units

    parameters, parameter_bytes = trained_parameter_bytes(model, precision)
    trainable = [p for p in model.parameters() if p.requires_grad]
    mixed_width = {"bf16-mixed": 2, "16-mixed": 2}.get(precision)
    gathered = (
        sum(p.numel() * (mixed_width if p.is_floating_point() else p.element_size()) for p in trainable)
        if mixed_width
        else parameter_bytes
    )
    units = len(shard_units(model, wrap=None, min_num_params=None)) + 1
    return ModelFacts(parameters, parameter_bytes, gathered, len(trainable), units)


def assumptions(settings: ProjectionSettings, facts: ModelFacts) -> str:
    """The lines that state what a projection assumes, printed with every projection."""
    links = "\n".join(f"  link {link.describe()}" for link in settings.links)
    return (
        f"projection assumptions: {facts.parameters:,} trainable parameters ({facts.parameter_bytes / 1e6:.4g} MB as "
        f"trained, {facts.gathered_bytes / 1e6:.4g} MB as FSDP gathers them, {facts.tensors} tensors, {facts.units} "
        f"FSDP units); {settings.describe()}\n{links}\n"
        "  per-rank compute fixed (weak) or divided by N (strong, linear in the batch); an all-reduce sends "
        "2(N-1)/N x its bytes per rank, an all-gather or reduce-scatter (N-1)/N x, at the link's bandwidth, and "
        "each of its steps (ring: N-1 per pass, tree: log2 N) pays the latency; not modelled: congestion, "
        "stragglers, a cluster's mix of faster links within a node and slower ones between nodes"
    )


def report_sweep_projection(
    measured: dict[str, list[Measurement]],
    *,
    model_path: str,
    model_kwargs: dict[str, Any],
    strategy: str,
    precision: str,
    settings: ProjectionSettings,
    out_dir: Path,
    print_fn: Any = print,
) -> tuple[Path, list[PlotSeries]]:
    """After a sweep: per mode, measured against modelled step time for each measured N (the
    model's bandwidth fitted on this machine), then the projection on each link from the smallest
    N's compute; writes ``projection.json`` in ``out_dir`` and returns its path and the projected
    lines for the sweep's plot."""
    from trainmesh.utilities.class_paths import import_class

    facts = facts_from_model(import_class(model_path, "model")(**model_kwargs), precision)
    print_fn("\n" + assumptions(settings, facts))
    entries, calibrations = [], {}
    for mode, runs in measured.items():
        calibration = calibrate(strategy, facts, runs, algorithm=settings.algorithm)
        calibrations[mode] = dataclasses.asdict(calibration)
        print_fn("\n" + format_calibration(f"{mode} {strategy}", calibration))
        base = min(runs, key=lambda run: run.processes)
        batch = base.per_rank_batch * (base.processes if mode == "strong" else 1)
        compute_s = calibration.compute_per_sample_s * batch
        entries += _project_all(
            mode, [strategy], facts, compute_s, batch, settings, print_fn, "measured on this machine"
        )
    return _write(out_dir, settings, facts, entries, calibrations), plot_series(entries)


def plot_series(entries: list[dict[str, Any]]) -> list[PlotSeries]:
    """Each projection as a dashed line on the sweep's plot: its feasible rows (a strong-scaling
    N with no whole sample per rank has no point)."""
    series = []
    for entry in entries:
        rows = [row for row in entry["rows"] if row["feasible"]]
        series.append(
            PlotSeries(
                label=f"{entry['mode']} projected, {entry['link']['name']}",
                mode=entry["mode"],
                processes=[row["processes"] for row in rows],
                samples_per_s=[row["samples_per_s"] for row in rows],
                efficiency=[row["efficiency"] for row in rows],
            )
        )
    return series


def _project_all(
    mode: str,
    strategies: list[str],
    facts: ModelFacts,
    compute_s: float,
    batch: int,
    settings: ProjectionSettings,
    print_fn: Any,
    compute_source: str,
) -> list[dict[str, Any]]:
    entries = []
    for strategy in strategies:
        for link in settings.links:
            rows = project(
                strategy,
                facts,
                compute_s=compute_s,
                batch=batch,
                link=link,
                overlap=settings.overlap,
                processes=settings.processes,
                mode=mode,
                algorithm=settings.algorithm,
                shard_size=settings.shard_size,
            )
            batch_text = f"{batch} per rank" if mode == "weak" else f"global {batch}"
            title = (
                f"projected {mode} scaling: {strategy} on {link.name}, compute {compute_s * 1e3:.3g} ms a step at "
                f"batch {batch_text} ({compute_source}), overlap {settings.overlap:g}"
            )
            print_fn("\n" + format_projection(title, rows))
            entries.append(_entry(mode, strategy, link, compute_s, batch, rows))
    return entries


def _entry(mode: str, strategy: str, link: Link, compute_s: float, batch: int, rows: list[Any]) -> dict[str, Any]:
    """One projection in projection.json: the plot draws each as a dashed line (processes against
    samples_per_s and efficiency, feasible rows only)."""
    return {
        "mode": mode,
        "strategy": strategy,
        "link": dataclasses.asdict(link),
        "compute_ms": compute_s * 1e3,
        "batch": batch,
        "verdict": projected_verdict(rows),
        "rows": [dataclasses.asdict(row) for row in rows],
    }


def _write(
    out_dir: Path, settings: ProjectionSettings, facts: ModelFacts, entries: list[Any], calibrations: dict[str, Any]
) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "projection.json"
    document = {
        "settings": dataclasses.asdict(settings),
        "facts": dataclasses.asdict(facts),
        "calibration": calibrations,
        "projections": entries,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def build_project_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "trainmesh project",
        SUMMARY,
        "The model is --model (built with --model.<arg> VALUE and a --config's model section, its "
        "parameters counted as `trainmesh estimate` counts them) or --parameters with --layers. The "
        "compute time of one rank's step is --compute_ms, or --flops_per_step / (--peak_flops x --mfu) "
        "(with --model and --peak_flops alone, its step's FLOPs are counted on its input: --batch_shape, "
        "--data's first batch or example_input_array). `trainmesh scale --link ...` measures it instead.",
    )
    parser.add_argument("--config", action="append", default=[], help="A `trainmesh fit` YAML config; repeatable.")
    parser.add_argument("--model", help="package.module:ClassName whose parameters to count.")
    parser.add_argument("--data", help="package.module:ClassName: its first batch is the input for FLOP counting.")
    parser.add_argument("--batch_shape", "--batch-shape", help="One rank's input shape, e.g. 8,1024.")
    parser.add_argument("--parameters", type=float, help="Trainable parameters, without --model (e.g. 117e6).")
    parser.add_argument("--layers", type=int, default=12, help="Transformer layers, with --parameters (default 12).")
    parser.add_argument(
        "--strategy", action="append", help="ddp, zero1, sharded, fsdp, hsdp; repeatable (default ddp, fsdp)."
    )
    parser.add_argument("--precision", default=None, help="As for fit (default: the config's, else 32-true).")
    parser.add_argument("--compute_ms", "--compute-ms", type=float, help="One rank's step without communication.")
    parser.add_argument("--flops_per_step", "--flops-per-step", type=float, help="One rank's step FLOPs (fwd + bwd).")
    parser.add_argument("--peak_flops", "--peak-flops", type=float, help="One device's peak FLOP/s.")
    parser.add_argument("--mfu", type=float, default=0.4, help="Share of the peak the step reaches (default 0.4).")
    parser.add_argument(
        "--batch", type=int, help="Samples per rank (weak) or in all (strong) (default: the input's rows, else 1)."
    )
    parser.add_argument("--mode", choices=("weak", "strong", "both"), default="weak")
    parser.add_argument("--out_dir", "--out-dir", help="Write projection.json here too.")
    parser.add_argument(
        "--sync_every",
        "--sync-every",
        help="Also project replica groups meeting every H steps (LocalSGD/DiLoCo) against ddp, e.g. 1,10,100.",
    )
    parser.add_argument(
        "--replica_groups", "--replica-groups", default="2,4,8", help="Replica groups for --sync_every (default 2,4,8)."
    )
    add_link_arguments(parser, default_links=DEFAULT_LINKS)
    return parser


def run_project_command(args: list[str]) -> int:
    """Print the assumptions and one projected table per mode, strategy and link."""
    from trainmesh.precision import normalize_precision
    from trainmesh.scaling.projection import modelled

    options, extra = build_project_parser().parse_known_args(args)
    settings = projection_settings(options, DEFAULT_LINKS)
    assert settings is not None  # default links
    strategies = options.strategy or ["ddp", "fsdp"]
    unknown = [name for name in strategies if name.lower() not in modelled()]
    if unknown:
        raise ValueError(f"--strategy {', '.join(unknown)}: the projection models {', '.join(modelled())}")
    facts, batch, flops, precision = _model_side(options, extra, normalize_precision)
    compute_s, source = _compute_seconds(options, flops)
    if options.batch is not None:
        batch = options.batch
    print(assumptions(settings, facts))
    entries = []
    for mode in ("weak", "strong") if options.mode == "both" else (options.mode,):
        entries += _project_all(mode, strategies, facts, compute_s, batch, settings, print, source)
    if options.sync_every:
        _project_semi_sync(options, facts, compute_s, settings)
    if options.out_dir:
        print(f"wrote {_write(Path(options.out_dir), settings, facts, entries, {})}")
    return 0


def _project_semi_sync(
    options: argparse.Namespace, facts: ModelFacts, compute_s: float, settings: ProjectionSettings
) -> None:
    """Per link: ddp and LocalSGD/DiLoCo at each H on each number of replica groups, and the crossovers."""
    from trainmesh.scaling import semi_sync_projection as semi

    every = semi.parse_counts(options.sync_every, "--sync_every")
    groups = semi.parse_counts(options.replica_groups, "--replica_groups")
    overlap, algorithm = settings.overlap, settings.algorithm
    for link in settings.links:
        rows = [
            row
            for n in groups
            for row in semi.semi_sync_rows(
                facts, compute_s=compute_s, link=link, groups=n, sync_every=every, overlap=overlap, algorithm=algorithm
            )
        ]
        crossings = [
            semi.crossover(facts, compute_s=compute_s, link=link, groups=n, overlap=overlap, algorithm=algorithm)
            for n in groups
        ]
        title = (
            f"semi-synchronous replica groups on {link.name}: compute {compute_s * 1e3:.3g} ms a step, ddp's overlap "
            f"{settings.overlap:g}, a LocalSGD/DiLoCo sync between steps (not hidden), its cost spread over H steps"
        )
        print("\n" + semi.format_semi_sync(title, rows, crossings))


def _model_side(
    options: argparse.Namespace, extra: list[str], normalize: Any
) -> tuple[ModelFacts, int, float | None, str]:
    """(facts, batch rows, counted FLOPs or None, precision) from --model or --parameters."""
    from trainmesh.utilities.class_paths import class_groups, import_class

    groups = class_groups(options.config, extra, command="project")
    precision = normalize(options.precision or groups["trainer"].get("precision", "32-true"))
    model_path = options.model or groups["model"].pop("class_path", None)
    groups["model"].pop("class_path", None)
    if options.parameters is not None:
        if model_path:
            raise ValueError("give --model or --parameters, not both")
        return facts_from_count(int(options.parameters), precision, layers=options.layers), 1, None, precision
    if not model_path:
        raise ValueError("say which model: --model package.module:ClassName, or --parameters 117e6 --layers 12")
    model = import_class(model_path, "model")(**groups["model"])
    facts = facts_from_model(model, precision)
    flops, rows = None, 1
    needs_count = options.compute_ms is None and options.flops_per_step is None
    if needs_count or options.batch is None:
        from trainmesh.utilities.model_input import model_input

        data_path = options.data or groups["data"].pop("class_path", None)
        groups["data"].pop("class_path", None)
        data = import_class(data_path, "data")(**groups["data"]) if data_path and not options.batch_shape else None
        batch, _ = model_input(model, batch_shape=options.batch_shape, data=data, model_path=model_path)
        if batch is not None:
            inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
            rows = int(inputs.shape[0])
            flops = _step_flops(model, inputs) if needs_count else None
    return facts, rows, flops, precision


def _step_flops(model: Any, inputs: Any) -> float:
    """Forward and backward FLOPs of one step on ``inputs`` (torch's FLOP counter, as ThroughputMonitor)."""
    from trainmesh.callbacks.throughput import count_step_flops

    with count_step_flops() as counter:
        output = model(inputs)
        output = output[0] if isinstance(output, (tuple, list)) else output
        output.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def _compute_seconds(options: argparse.Namespace, counted: float | None) -> tuple[float, str]:
    if options.compute_ms is not None:
        return options.compute_ms / 1e3, "given"
    flops = options.flops_per_step or counted
    if flops is None or options.peak_flops is None:
        raise ValueError(
            "the projection needs one rank's compute time per step: --compute_ms, or --flops_per_step (or --model "
            "with an input to count them on) with --peak_flops and --mfu; `trainmesh scale --link ...` measures it"
        )
    if not 0 < options.mfu <= 1:
        raise ValueError(f"--mfu {options.mfu}: the share of the peak reached is in (0, 1]")
    where = "given" if options.flops_per_step else "counted"
    return flops / (options.peak_flops * options.mfu), (
        f"{flops:.3g} FLOPs {where} / ({options.peak_flops:.3g} FLOP/s x MFU {options.mfu:g})"
    )
