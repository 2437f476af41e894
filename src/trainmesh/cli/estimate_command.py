"""``trainmesh estimate --model CLASS``: per-rank memory under each strategy, before running.

trainmesh estimate --model my_pkg.models:Net --world_size 8 --precision bf16-mixed --batch_shape 32,3,224,224
trainmesh estimate --config run.yaml --model.hidden_dim 256     # the model and data of a fit config
"""

from __future__ import annotations

import argparse
from typing import Any

from trainmesh.utilities.command_parser import command_parser

# One line for `trainmesh --help`, which lists this command next to fit/validate/test/predict.
SUMMARY = "Estimate per-rank memory (parameters, gradients, optimizer state, activations) under each strategy."


def build_estimate_parser(strategies: list[str]) -> argparse.ArgumentParser:
    parser = command_parser(
        "trainmesh estimate",
        SUMMARY,
        "--model.<arg> VALUE and --data.<arg> VALUE set the classes' arguments, as for `trainmesh fit`; "
        "a --config file's model/data sections too, and its trainer section's precision. The input batch is "
        "--batch_shape, else one batch of --data, else the model's example_input_array.",
    )
    parser.add_argument("--config", action="append", default=[], help="A `trainmesh fit` YAML config; repeatable.")
    parser.add_argument("--model", help="package.module:ClassName (default: the config's, else the demo classifier)")
    parser.add_argument(
        "--data", help="package.module:ClassName: one training batch is the input (default: the config's)"
    )
    parser.add_argument("--world_size", "--world-size", type=int, default=2, help="ranks (processes) in the run")
    parser.add_argument(
        "--shard_size", "--shard-size", type=int, default=None, help="hsdp's shard group (default: all ranks)"
    )
    parser.add_argument(
        "--precision", default=None, help="as for fit: '32-true' (default), 'bf16-mixed', '16-mixed', ..."
    )
    parser.add_argument(
        "--optimizer",
        default=None,
        help="adam, adamw, sgd, sgd_momentum (default: the model's configure_optimizers, else adam)",
    )
    parser.add_argument(
        "--batch_shape",
        "--batch-shape",
        default=None,
        help="one rank's input batch shape, e.g. 32,64 (token ids for a model that starts with nn.Embedding)",
    )
    # The strategies that state a memory model (their capabilities), one line each.
    parser.add_argument("--strategy", action="append", choices=strategies, help="repeatable (default: all)")
    parser.add_argument(
        "--memory_budget", "--memory-budget", type=float, default=None, help="MiB per device: say what 'auto' picks"
    )
    return parser


def run_estimate_command(args: list[str]) -> int:
    """Print one line per strategy and, with ``--memory_budget``, what ``strategy="auto"`` picks.

    >>> run_estimate_command(["--model", "trainmesh.demo:DigitsClassifier", "--strategy", "ddp"])  # doctest: +SKIP
    0
    """
    from trainmesh.memory_estimate import estimate_memory, memory_models
    from trainmesh.precision import normalize_precision
    from trainmesh.utilities.class_paths import DEFAULT_DATA, DEFAULT_MODEL, class_groups, import_class
    from trainmesh.utilities.model_input import model_input

    strategies = sorted(memory_models())
    config, extra = build_estimate_parser(strategies).parse_known_args(args)
    groups = class_groups(config.config, extra, command="estimate")
    model_path = config.model or groups["model"].pop("class_path", DEFAULT_MODEL)
    groups["model"].pop("class_path", None)
    # The demo model's data is the digits, as for `trainmesh fit`; another model's data is named.
    data_path = config.data or groups["data"].pop("class_path", DEFAULT_DATA if model_path == DEFAULT_MODEL else None)
    groups["data"].pop("class_path", None)
    # The precisions `fit` takes, with its aliases (32, 16, bf16): refused here as there.
    precision = normalize_precision(config.precision or groups["trainer"].get("precision", "32-true"))
    model = import_class(model_path, "model")(**groups["model"])
    data = import_class(data_path, "data")(**groups["data"]) if data_path and not config.batch_shape else None
    batch, source = model_input(model, batch_shape=config.batch_shape, data=data, model_path=model_path)
    optimizer = config.optimizer or _model_optimizer(model)
    print(
        f"{model_path}: {sum(p.numel() for p in model.parameters()):,} parameters, optimizer "
        f"{optimizer if isinstance(optimizer, str) else type(optimizer).__name__}, "
        f"precision {precision}, N = {config.world_size}, input: {source}"
    )
    for strategy in config.strategy or strategies:
        estimate = estimate_memory(
            model,
            strategy=strategy,
            world_size=config.world_size,
            precision=precision,
            optimizer=optimizer,
            batch=batch,
            shard_size=config.shard_size,
        )
        print(estimate.describe())
    if config.memory_budget is not None:
        from trainmesh.strategies.auto import AutoStrategy

        _, reason = AutoStrategy(
            memory_budget=int(config.memory_budget * 2**20), optimizer=optimizer, batch=batch
        ).choose(model, world_size=config.world_size)
        print(reason)
    return 0


def _model_optimizer(model: Any) -> Any:
    """The model's own optimizer where configure_optimizers builds one without a Trainer."""
    from trainmesh.trainer.optimizers import parse_optimizers

    if not callable(getattr(model, "configure_optimizers", None)):
        return "adam"
    try:
        optimizers, _ = parse_optimizers(model.configure_optimizers(), type(model).__name__)
    except (AttributeError, RuntimeError, TypeError, ValueError):  # it needs a Trainer: assume Adam
        return "adam"
    return optimizers[0] if optimizers else "adam"
