"""The leg of test_zero1_optimizers: every torch.optim optimizer, plain under DDP and sharded by
zero1's ``shard_optimizer_state``, stepped in one 2-process gloo group.

python zero1_optimizers_run.py OUT   -> rank 0 writes {optimizer name: problem or None} to OUT (JSON)
"""

import faulthandler
import inspect
import json
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from trainmesh.strategies.ddp import shard_optimizer_state  # noqa: E402
from trainmesh.strategies.process_group import leave_process_group  # noqa: E402

STEPS, LR = 3, 0.01
# LBFGS is left out: it treats all of its parameters as one vector (curvature history, line
# search, stopping tests on the whole gradient), so over one rank's shard it is a different
# algorithm, and each rank's step calls the closure (forward, backward: DDP's all-reduce) a
# number of times that depends on its own shard: the ranks' collectives stop matching (tried:
# plain LBFGS under DDP ran its closure 60 times on both ranks; sharded, gloo timed out).
NOT_SHARDABLE = {"LBFGS"}


def optimizer_classes() -> dict[str, type[torch.optim.Optimizer]]:
    """Every optimizer class torch.optim exports that takes ``lr=``."""
    found = {}
    for name in sorted(dir(torch.optim)):
        cls = getattr(torch.optim, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, torch.optim.Optimizer)
            and cls is not torch.optim.Optimizer
            and "lr" in inspect.signature(cls.__init__).parameters
        ):
            found[name] = cls
    return found


def model_for(name: str) -> torch.nn.Module:
    torch.manual_seed(3)
    if name == "SparseAdam":  # it takes sparse gradients only
        return torch.nn.EmbeddingBag(32, 4, mode="mean", sparse=True)
    # Matrices only: Muon optimizes 2-D parameters and nothing else.
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16, bias=False),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 16, bias=False),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 4, bias=False),
    )


def batch_for(name: str, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)  # each rank its own data, as DDP has
    x = torch.randint(0, 32, (6, 3), generator=g) if name == "SparseAdam" else torch.randn(6, 8, generator=g)
    return x, torch.randint(0, 4, (6,), generator=g)


def build(name: str, cls: type, *, sharded: bool):
    model = DistributedDataParallel(model_for(name))
    params = list(model.parameters())
    # Two groups, each with an lr of its own (the defaults' lr is neither) and a scheduler's
    # key, where the model has two parameters.
    groups = (
        [{"params": params[:-1], "lr": LR * 2}, {"params": params[-1:], "lr": LR / 2, "initial_lr": LR / 2}]
        if len(params) > 1
        else [{"params": params}]
    )
    optimizer = cls(groups, lr=LR)
    return model, (shard_optimizer_state(optimizer) if sharded else optimizer)


def train(name: str, model, optimizer, rank: int) -> dict[str, torch.Tensor]:
    for step in range(STEPS):
        x, y = batch_for(name, rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def hyper_parameters(optimizer) -> list[dict]:
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def compare(name: str, cls: type, rank: int) -> str | None:
    """None when zero1 gives what the plain optimizer gives, else what differs."""
    plain_model, plain = build(name, cls, sharded=False)
    expected = train(name, plain_model, plain, rank)
    zero_model, zero = build(name, cls, sharded=True)
    if type(zero.optim) is not cls:
        return f"the shards are stepped by {type(zero.optim).__name__}, not {name}"
    if zero.defaults != plain.defaults:
        return f"defaults differ: {zero.defaults} != {plain.defaults}"
    for holder in (zero, zero.optim):  # the wrapper and this rank's local optimizer
        if hyper_parameters(holder) != hyper_parameters(plain):
            return f"hyper-parameters differ: {hyper_parameters(holder)} != {hyper_parameters(plain)}"
    got = train(name, zero_model, zero, rank)
    for key, value in expected.items():
        if not torch.equal(value, got[key]):
            return f"{key} differs by {(value - got[key]).abs().max().item():.3g} after {STEPS} steps"
    return None


def worker(rank: int, out: str, port: int) -> None:
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where it hangs, then ends
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    problems = {}
    for name, cls in optimizer_classes().items():
        if name in NOT_SHARDABLE:
            continue
        try:
            problems[name] = compare(name, cls, rank)
        except Exception as err:  # noqa: BLE001 - every optimizer gets its verdict, not only the first
            problems[name] = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}"
        dist.barrier()  # a rank that failed early waits for its peer before the next optimizer
    if rank == 0:
        with open(out, "w") as file:
            json.dump(problems, file)
    leave_process_group(failed=False)  # together, and giving zero1's gloo threads time to let go


if __name__ == "__main__":
    from trainmesh.launchers.environments import find_free_port

    # Forks where the test forked this process with torch loaded (TESTS_WORKERS, helpers/batches.py);
    # then no watchdog here: a fork would wait forever for its thread in its own first one.
    start = "fork" if os.environ.get("TESTS_WORKERS") == "fork" else "spawn"
    if start == "spawn":
        faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "100")), exit=True)
    torch.multiprocessing.start_processes(worker, args=(sys.argv[1], find_free_port()), nprocs=2, start_method=start)
