"""Leg of the spawn-launcher tests, run as its own program (spawned workers import it). One program,
two ddp_spawn launches of 2 workers, from a Runtime made at module level (a common script shape:
each worker imports the script again and builds its own RUNTIME, which launch() never sees).

python spawn_run.py OUT  -> the parent writes OUT.parent: the thread count torch chose in it (a
                            plain process: before trainmesh is imported, with the
                            OMP_NUM_THREADS it was started with). Then:
  1. with OMP_NUM_THREADS unset, seeded, the launched runtime passed to the function: each worker
     writes OUT.share.rank{r} (JSON): its torch thread count, the torchrun variables it sees,
     whether a rank_zero_only function ran in it, and from the module-level RUNTIME (DDP's
     all-reduce run through it) its rank, the world size and the sum of all ranks; the parent
     prints SAME when rank 0's torch.rand(4) is the one it draws next (the workers start from
     its RNG state);
  2. with the OMP_NUM_THREADS it was started with: each worker writes its torch thread count
     to OUT.chosen.rank{r}.
"""

import faulthandler
import json
import os
import sys

import torch

PLAIN_THREADS = torch.get_num_threads()  # before trainmesh is imported: what a plain torch process has

import trainmesh as tm  # noqa: E402
from trainmesh.utilities.rank_zero import rank_zero_info  # noqa: E402

TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
RUNTIME = tm.Runtime(accelerator="cpu", strategy="ddp_spawn", devices=2)


@tm.rank_zero_only
def on_rank_zero_only() -> bool:
    rank_zero_info("rank_zero_info ran")  # the test counts this line in the output
    return True


def module_level() -> dict:
    """What the module-level RUNTIME, rebuilt in this worker, makes of the group launch() joined."""
    model = RUNTIME.setup(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()  # DDP's all-reduce: the group is really joined
    total = RUNTIME.all_reduce(torch.tensor(float(RUNTIME.global_rank)), "sum")
    return {"rank": RUNTIME.global_rank, "world_size": RUNTIME.world_size, "rank_sum": total.item()}


def record_place(runtime: tm.Runtime, out: str) -> torch.Tensor:
    draw = torch.rand(4)  # rank 0's first draw comes back to the parent
    figures = {
        "rank": runtime.global_rank,
        "threads": torch.get_num_threads(),
        "env": {name: os.environ.get(name) for name in TORCHRUN_VARIABLES},
        "rank_zero_only_ran": on_rank_zero_only() is True,
        "module_level": module_level(),
    }
    with open(f"{out}.rank{runtime.global_rank}", "w") as file:
        json.dump(figures, file)
    return draw


def record_threads(runtime: tm.Runtime, out: str) -> None:
    with open(f"{out}.rank{runtime.global_rank}", "w") as file:
        json.dump({"threads": torch.get_num_threads()}, file)


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "160")), exit=True)
    out = sys.argv[1]
    with open(f"{out}.parent", "w") as file:
        json.dump({"threads": PLAIN_THREADS}, file)
    # Spawned workers are new interpreters that read this process's environment when they start.
    chosen = os.environ.pop("OMP_NUM_THREADS", None)
    tm.seed_everything(3)
    in_worker = RUNTIME.launch(record_place, RUNTIME, f"{out}.share")
    print("SAME" if torch.equal(in_worker, torch.rand(4)) else f"DIFFERENT {in_worker}", flush=True)
    if chosen is not None:
        os.environ["OMP_NUM_THREADS"] = chosen
        RUNTIME.launch(record_threads, RUNTIME, f"{out}.chosen")
