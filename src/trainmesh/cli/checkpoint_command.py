"""``trainmesh checkpoint consolidate SRC DST``, ``trainmesh checkpoint inspect SRC`` and
``trainmesh checkpoint verify PATH``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainmesh.cli.summaries import CHECKPOINT_SUMMARY
from trainmesh.trainer.checkpointing import TENSOR_ENTRIES

# One line for `trainmesh --help`, which lists this command next to fit/validate/test/predict.
SUMMARY = CHECKPOINT_SUMMARY  # in cli/summaries.py, torch-free

# Where the Trainer keeps the model's weights: the checkpoint code stores entries without
# knowing their names, this command shows the Trainer's model entry.
MODEL_KEY = TENSOR_ENTRIES.model


def run_checkpoint_command(args: list[str]) -> int:
    from jsonargparse import ArgumentParser

    # allow_abbrev=False: argparse would otherwise take a prefix of an option for the option.
    parser = ArgumentParser(
        prog="trainmesh checkpoint", description="Work with trainmesh checkpoints.", allow_abbrev=False
    )
    commands = parser.add_subcommands(dest="action")
    consolidate = ArgumentParser(
        description="Write a distributed checkpoint (a directory) as one file that "
        f"torch.load reads, with the full weights under {MODEL_KEY!r}.",
        allow_abbrev=False,
    )
    consolidate.add_argument("source", type=str, help="the distributed checkpoint directory")
    consolidate.add_argument("destination", type=str, help="the file to write")
    inspect = ArgumentParser(description="List what a checkpoint (file or directory) holds.", allow_abbrev=False)
    inspect.add_argument("source", type=str, help="a checkpoint file or directory")
    verify = ArgumentParser(
        description="Check a checkpoint (file or directory) without loading it: complete, and every "
        "checksum matching. Exit status 0: ok, 1: damaged, 2: missing, partial or not a checkpoint.",
        allow_abbrev=False,
    )
    verify.add_argument("source", type=str, help="a checkpoint file or directory")
    commands.add_subcommand("consolidate", consolidate, help="one file from a distributed checkpoint")
    commands.add_subcommand("inspect", inspect, help="what a checkpoint holds")
    commands.add_subcommand("verify", verify, help="check a checkpoint's completeness and checksums")
    config = parser.parse_args(args)
    if config.action == "consolidate":
        return _consolidate(config.consolidate.source, config.consolidate.destination)
    if config.action == "verify":
        return _verify(config.verify.source)
    return _inspect(config.inspect.source)


def _consolidate(source: str, destination: str) -> int:
    from trainmesh.checkpoint.distributed import consolidate

    if not Path(source).is_dir():
        raise ValueError(f"{source} is not a distributed checkpoint directory (a single file already is consolidated)")
    written = consolidate(source, destination)
    print(
        f"wrote {written} ({written.stat().st_size / 1e6:.1f} MB): torch.load(...)[{MODEL_KEY!r}] holds the full weights"
    )
    return 0


def _verify(source: str) -> int:
    from trainmesh.checkpoint.verify import verify_checkpoint

    verdict = verify_checkpoint(source)
    for line in verdict.lines:
        print(line)
    return verdict.status


def _inspect(source: str) -> int:
    path = Path(source)
    if path.is_dir():
        from trainmesh.checkpoint.distributed import inspect_distributed

        # Sharded entries are not in `rest`, as the file branch pops the tensor entries below.
        rest, shapes = inspect_distributed(path)
        model = shapes.get(MODEL_KEY, {})
        print(f"{path}: distributed checkpoint, {len(list(path.glob('*.distcp')))} shard file(s)")
    else:
        from trainmesh.checkpoint.io import load_checkpoint_file

        rest = load_checkpoint_file(path)
        if _describe_other_file(path, rest):
            return 0
        model = {k: tuple(v.shape) for k, v in rest.pop(MODEL_KEY, {}).items() if hasattr(v, "shape")}
        rest.pop("optimizer_states", None)
        print(f"{path}: single-file checkpoint")
    _print_summary(rest, model)
    return 0


# Entries every checkpoint the Trainer writes holds: a dict without them was written by something else.
_TRAINER_ENTRIES = ("epoch", "global_step")


def _describe_other_file(path: Path, content: dict[str, Any]) -> bool:
    """Say what a file is when it is not a Trainer checkpoint (a bare ``model.state_dict()``, or a
    dict of other entries) and how to load it; False for a Trainer checkpoint."""
    if MODEL_KEY in content or any(key in content for key in _TRAINER_ENTRIES):
        return False
    tensors = {key: value for key, value in content.items() if hasattr(value, "shape")}
    if content and len(tensors) == len(content):
        print(
            f"{path}: a bare state_dict (what torch.save(model.state_dict(), ...) writes), not a trainmesh "
            f"checkpoint: no epoch, global step, optimizer or loop state. Load it with "
            f"model.load_state_dict(torch.load(path)); to resume training, use a checkpoint the Trainer wrote."
        )
        count = sum(_numel(tuple(value.shape)) for value in tensors.values())
        print(f"  {len(tensors)} tensors, {count:,} values")
        for key, value in tensors.items():
            print(f"    {key}: {list(value.shape)} {str(value.dtype).removeprefix('torch.')}")
        return True
    print(
        f"{path}: a dict saved with torch.save, not a trainmesh checkpoint (it has no {MODEL_KEY!r}, epoch or "
        f"global_step entries); its entries: {sorted(map(str, content))}"
    )
    return True


def _print_summary(rest: dict[str, Any], model: dict[str, tuple[int, ...]]) -> None:
    """``model``: the model's tensor shapes by parameter name; ``rest``: the other entries."""
    print(
        f"  trainmesh {rest.get('trainmesh_version', '?')}, epoch {rest.get('epoch')}, global step {rest.get('global_step')}"
    )
    loop = rest.get("loop", {})
    if loop:
        print(
            f"  loop: {loop.get('batches_done')} batch(es) into the epoch, epoch finished: {loop.get('epoch_finished')}"
        )
    if rest.get("hyper_parameters"):
        print(f"  hyperparameters: {rest['hyper_parameters']}")
    print(f"  callbacks: {sorted(rest.get('callbacks', {}))}")
    count = sum(_numel(shape) for shape in model.values())
    print(f"  model: {len(model)} tensors, {count:,} values")
    for key, shape in model.items():
        print(f"    {key}: {list(shape)}")
    others = sorted(k for k in rest if k not in ("loop", "hyper_parameters", "callbacks"))
    print(f"  other entries: {others}")


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
