"""``trainmesh estimate --model CLASS``: per-rank memory under each strategy, before running.

trainmesh estimate --model my_pkg.models:Net --world_size 8 --precision bf16-mixed --batch_shape 32,3,224,224
"""

from __future__ import annotations

import argparse
from typing import Any

# One line for `trainmesh --help`, which lists this command next to fit/validate/test/predict.
SUMMARY = "Estimate per-rank memory (parameters, gradients, optimizer state, activations) under each strategy."


def run_estimate_command(args: list[str]) -> int:
    """Print one line per strategy and, with ``--memory_budget``, what ``strategy="auto"`` picks.

    >>> run_estimate_command(["--model", "trainmesh.demo:DigitsClassifier", "--strategy", "ddp"])  # doctest: +SKIP
    0
    """
    from trainmesh.cli.classes import import_class
    from trainmesh.memory_estimate import estimate_memory, memory_models

    parser = argparse.ArgumentParser(prog="trainmesh estimate", description=SUMMARY, allow_abbrev=False)
    parser.add_argument(
        "--model",
        default="trainmesh.demo:DigitsClassifier",
        help="package.module:ClassName, built with its default arguments",
    )
    parser.add_argument("--world_size", type=int, default=2, help="ranks (processes) in the run")
    parser.add_argument("--shard_size", type=int, default=None, help="hsdp's shard group (default: all ranks)")
    parser.add_argument("--precision", default="32-true", help="'32-true', 'bf16-mixed', '16-mixed', 'bf16-true'")
    parser.add_argument(
        "--optimizer",
        default=None,
        help="adam, adamw, sgd, sgd_momentum (default: the model's configure_optimizers, else adam)",
    )
    parser.add_argument(
        "--batch_shape", default=None, help="one rank's input batch shape, e.g. 32,64: adds activations"
    )
    # The strategies that state a memory model (their capabilities), one line each.
    strategies = sorted(memory_models())
    parser.add_argument("--strategy", action="append", choices=strategies, help="repeatable (default: all)")
    parser.add_argument("--memory_budget", type=float, default=None, help="MiB per device: say what 'auto' picks")
    config = parser.parse_args(args)
    model = import_class(config.model, "model")()
    optimizer = config.optimizer or _model_optimizer(model)
    batch = _random_batch(config.batch_shape)
    print(
        f"{config.model}: {sum(p.numel() for p in model.parameters()):,} parameters, optimizer "
        f"{optimizer if isinstance(optimizer, str) else type(optimizer).__name__}, "
        f"precision {config.precision}, N = {config.world_size}"
    )
    for strategy in config.strategy or strategies:
        estimate = estimate_memory(
            model,
            strategy=strategy,
            world_size=config.world_size,
            precision=config.precision,
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


def _random_batch(shape: str | None) -> Any:
    import torch

    if not shape:
        return None
    return torch.randn(*(int(size) for size in shape.split(",")))
