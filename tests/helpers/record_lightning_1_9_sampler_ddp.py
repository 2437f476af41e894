"""Record what each rank of pytorch-lightning 1.9.5's ddp (2 CPU processes) reads and trains to on
``tests/trainer/sampler_ddp_run.py``'s 1.x cases (``LIGHTNING1``: a 1.x module, shuffled training and
validation loaders) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_sampler_ddp.py

and rewrites ``tests/helpers/lightning_1_9_sampler_ddp.json``; ``tests/trainer/test_lightning_sampler_ddp.py``
compares trainmesh's ranks (the same launch as its Lightning 2.6 cases) with it.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "trainer" / "sampler_ddp_run.py"
OUT = HERE / "lightning_1_9_sampler_ddp.json"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    import pytorch_lightning as pl
    import torch

    env = {k: v for k, v in os.environ.items() if k != "PL_GLOBAL_SEED"}
    env["MASTER_PORT"] = str(_free_port())
    recorded: dict = {}
    with tempfile.TemporaryDirectory() as root:
        # 1.9.5's ddp starts the second process itself (the script again), as its owners define it
        subprocess.run([sys.executable, str(SCRIPT), "lightning1", f"{root}/out"], cwd=root, env=env, check=True)
        for path in sorted(Path(root, "out").glob("*-rank*.pt")):
            case, rank = path.stem.rsplit("-rank", 1)
            record = torch.load(path, weights_only=False)
            record["weights"] = {k: v.tolist() for k, v in record["weights"].items()}
            recorded.setdefault(case, {})[rank] = record
    recorded["_source"] = (
        f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU, ddp on 2 processes: "
        "tests/trainer/sampler_ddp_run.py lightning1 (tests/helpers/record_lightning_1_9_sampler_ddp.py)"
    )
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded {len(recorded) - 1} case(s)")
