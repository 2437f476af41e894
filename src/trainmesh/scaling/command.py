"""``trainmesh scale``: the command-line face of :func:`trainmesh.scaling.run_scaling`.

>>> run_scale_command(["--max_processes", "2"])  # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
from typing import Any

from trainmesh.scaling.summaries import SCALE_SUMMARY
from trainmesh.utilities.command_parser import command_parser

SUMMARY = SCALE_SUMMARY


def build_scale_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "trainmesh scale",
        SUMMARY,
        "--model.<arg> VALUE and --data.<arg> VALUE set the classes' arguments, "
        "as for `trainmesh fit`; a --config file's model/data sections too, and its "
        "trainer section's strategy, accelerator and precision. Multi-word flags are spelled with "
        "underscores as for fit and estimate (--max_processes); the hyphenated spelling is accepted too. "
        "--link projects the measured step past this machine (`trainmesh project --help`).",
    )
    parser.add_argument("--config", action="append", default=[], help="A `trainmesh fit` YAML config; repeatable.")
    parser.add_argument("--model", help="package.module:ClassName (default: the demo classifier).")
    parser.add_argument("--data", help="package.module:ClassName (default: the digits data).")
    parser.add_argument("--processes", help="Comma-separated process counts, e.g. 1,2,4.")
    parser.add_argument(
        "--max_processes", "--max-processes", type=int, default=2, help="Measure 1, 2, 4, ... up to this (default 2)."
    )
    parser.add_argument("--mode", choices=("strong", "weak", "both"), default="both")
    parser.add_argument("--strategy", help="Any trainmesh strategy name (default: the config's, else ddp).")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), help="Default: the config's, else cpu.")
    parser.add_argument("--precision", help="e.g. bf16-mixed (default: the config's, else 32-true).")
    parser.add_argument(
        "--batch_size", "--batch-size", type=int, help="Global batch (strong) and per-rank batch (weak)."
    )
    parser.add_argument("--warmup_steps", "--warmup-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="Steps per timed window.")
    parser.add_argument("--windows", type=int, default=3, help="Timed windows per N (their spread is reported).")
    parser.add_argument(
        "--peak_flops",
        "--peak-flops",
        type=float,
        help="One device's peak FLOP/s, for the MFU column (GPUs in the table need none; CPUs have no MFU without it).",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="Torch threads in every rank at every N (default: OMP_NUM_THREADS if set, else the physical cores // the largest N).",
    )
    parser.add_argument("--out_dir", "--out-dir", default="scaling", help="Where scaling.csv/.json/.png go.")
    from trainmesh.scaling.project_command import add_link_arguments

    add_link_arguments(parser, default_links=[])
    return parser


def run_scale_command(args: list[str]) -> int:
    from trainmesh.scaling import DEMO_DATA, DEMO_MODEL, run_scaling
    from trainmesh.scaling.project_command import projection_settings

    options, extra = build_scale_parser().parse_known_args(args)
    groups = _class_groups(options.config, extra)
    model = options.model or groups["model"].pop("class_path", DEMO_MODEL)
    data = options.data or groups["data"].pop("class_path", DEMO_DATA)
    groups["model"].pop("class_path", None), groups["data"].pop("class_path", None)
    trainer = groups["trainer"]
    processes = [int(n) for n in options.processes.split(",")] if options.processes else None
    run_scaling(
        model=model,
        model_kwargs=groups["model"],
        data=data,
        data_kwargs=groups["data"],
        processes=processes,
        max_processes=options.max_processes,
        mode=options.mode,
        strategy=str(options.strategy or trainer.get("strategy", "ddp")),
        accelerator=str(options.accelerator or trainer.get("accelerator", "cpu")),
        precision=str(options.precision or trainer.get("precision", "32-true")),
        batch_size=options.batch_size,
        warmup_steps=options.warmup_steps,
        steps_per_window=options.steps,
        windows=options.windows,
        out_dir=options.out_dir,
        peak_flops=options.peak_flops,
        projection=projection_settings(options, default_links=[]),
        threads=options.threads,
    )
    return 0


_APPLIED_TRAINER_SETTINGS = ("strategy", "accelerator", "precision")


def _class_groups(configs: list[str], extra: list[str]) -> dict[str, dict[str, Any]]:
    """The model and data arguments from config files, then ``--model.x V`` flags (later wins), and
    the trainer settings the sweep applies (strategy, accelerator, precision)."""
    from trainmesh.utilities.class_paths import class_groups

    groups = class_groups(configs, extra, command="scale")
    trainer = groups["trainer"]
    unapplied = sorted(set(trainer) - set(_APPLIED_TRAINER_SETTINGS))
    if unapplied:
        # Said, not silently dropped: the sweep times one training step (forward, backward,
        # optimizer) per N on a fixed batch, so loop settings have no place in it.
        print(
            f"trainmesh scale: the config's trainer settings {', '.join(unapplied)} are not applied; the sweep "
            f"times the training step at each N and applies only {', '.join(_APPLIED_TRAINER_SETTINGS)}"
        )
    groups["trainer"] = {key: trainer[key] for key in _APPLIED_TRAINER_SETTINGS if key in trainer}
    return groups
