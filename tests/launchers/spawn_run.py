"""Legs of the spawn-launcher tests, each run as its own program (spawned workers import it).

python spawn_run.py place OUT  -> under ddp_spawn (2 workers) each worker writes OUT.rank{r} (JSON):
                                  its torch thread count, the torchrun variables it sees, and
                                  whether a rank_zero_only function ran in it; the parent writes
                                  OUT.parent: the thread count torch chose in it (a plain process:
                                  before trainmesh is imported), and seeded before the launch, it
                                  prints SAME when rank 0's torch.rand(4) is the one it draws next
                                  (the workers start from its RNG state)
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


@tm.rank_zero_only
def on_rank_zero_only() -> bool:
    rank_zero_info("rank_zero_info ran")  # the test counts this line in the output
    return True


def record_place(runtime: tm.Runtime, out: str) -> torch.Tensor:
    figures = {
        "rank": runtime.global_rank,
        "threads": torch.get_num_threads(),
        "env": {name: os.environ.get(name) for name in TORCHRUN_VARIABLES},
        "rank_zero_only_ran": on_rank_zero_only() is True,
    }
    with open(f"{out}.rank{runtime.global_rank}", "w") as file:
        json.dump(figures, file)
    return torch.rand(4)  # rank 0's draw comes back to the parent


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "100")), exit=True)
    mode = sys.argv[1]
    if mode == "place":
        with open(f"{sys.argv[2]}.parent", "w") as file:
            json.dump({"threads": PLAIN_THREADS}, file)
        tm.seed_everything(3)
        runtime = tm.Runtime(accelerator="cpu", strategy="ddp_spawn", devices=2)
        in_worker = runtime.launch(record_place, runtime, sys.argv[2])
        print("SAME" if torch.equal(in_worker, torch.rand(4)) else f"DIFFERENT {in_worker}")
