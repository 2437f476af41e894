"""Legs of the spawn-launcher tests, each run as its own program (spawned workers import it).

python spawn_run.py place OUT  -> under ddp_spawn (2 workers) each worker writes OUT.rank{r} (JSON):
                                  its torch thread count, the torchrun variables it sees, and
                                  whether a rank_zero_only function ran in it
"""

import faulthandler
import json
import os
import sys

import torch

import trainmesh as tm
from trainmesh.utilities.rank_zero import rank_zero_info

TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@tm.rank_zero_only
def on_rank_zero_only() -> bool:
    rank_zero_info("rank_zero_info ran")  # the test counts this line in the output
    return True


def record_place(runtime: tm.Runtime, out: str) -> None:
    figures = {
        "rank": runtime.global_rank,
        "threads": torch.get_num_threads(),
        "env": {name: os.environ.get(name) for name in TORCHRUN_VARIABLES},
        "rank_zero_only_ran": on_rank_zero_only() is True,
    }
    with open(f"{out}.rank{runtime.global_rank}", "w") as file:
        json.dump(figures, file)


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "100")), exit=True)
    mode = sys.argv[1]
    if mode == "place":
        runtime = tm.Runtime(accelerator="cpu", strategy="ddp_spawn", devices=2)
        runtime.launch(record_place, runtime, sys.argv[2])
