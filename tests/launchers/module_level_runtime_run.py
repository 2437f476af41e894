"""A Runtime made at module level, used inside the function ddp_spawn runs (a common script shape).

python module_level_runtime_run.py OUT  -> each worker writes OUT.rank{r} (JSON): its rank, the world
                                           size and the sum of all ranks, from the module-level runtime
"""

import faulthandler
import json
import os
import sys

import torch

import trainmesh as tm

# Each spawned worker imports this script again and so builds its own RUNTIME, which launch()
# never sees: the one launch() set up travels to the worker inside the pickled call.
RUNTIME = tm.Runtime(accelerator="cpu", strategy="ddp_spawn", devices=2)


def train(out: str) -> None:
    model = RUNTIME.setup(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()  # DDP's all-reduce: the group is really joined
    total = RUNTIME.all_reduce(torch.tensor(float(RUNTIME.global_rank)), "sum")
    with open(f"{out}.rank{RUNTIME.global_rank}", "w") as file:
        json.dump({"rank": RUNTIME.global_rank, "world_size": RUNTIME.world_size, "rank_sum": total.item()}, file)


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "100")), exit=True)
    RUNTIME.launch(train, sys.argv[1])
