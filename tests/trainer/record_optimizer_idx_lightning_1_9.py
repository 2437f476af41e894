"""Record pytorch-lightning 1.9.5 running optimizer_idx_run.py's Gan under ddp, as the data test_optimizer_idx.py's
ddp legs compare with (its one-process numbers are held in the test itself).

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
tests/helpers/record_lightning_1_9_names.py for how to build one):

    /tmp/pl19/bin/python tests/trainer/record_optimizer_idx_lightning_1_9.py [VARIANT ...]

The program is optimizer_idx_run.py's under strategy="ddp" on 2 CPU processes (gloo), each reading its half
of each batch of 4 through the DistributedSampler(shuffle=True, seed=0) 1.9.5 gives every training loader
under ddp, with ``pytorch_lightning`` in trainmesh's place (record_tbptt_lightning_1_9.py's stand-in). Each
variant's global_step and weights (rounded to 7 places) are written into ``optimizer_idx_lightning_1_9.json``,
replacing that variant's entry. 1.9.5 launches the other rank by running this script's command line again,
so each variant gets a process of its own.
"""

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE / "optimizer_idx_lightning_1_9.json"
VARIANTS = ("plain", "acc")


def record_ddp_leg(variant: str) -> None:
    """One variant under 1.9.5's ddp (this process and the rank 1.9.5 starts); rank 0 writes the entry."""
    from optimizer_idx_run import fit

    module, trainer = fit(variant, "ddp", 2)
    if not trainer.is_global_zero:
        return
    recorded = json.loads(RECORDING.read_text()) if RECORDING.exists() else {}
    recorded[variant] = {
        "global_step": trainer.global_step,
        "weights": {
            name: [round(v, 7) for v in tensor.detach().flatten().tolist()]
            for name, tensor in module.state_dict().items()
        },
    }
    RECORDING.write_text(json.dumps(recorded, indent=0) + "\n")
    print(f"recorded ddp {variant}: global_step {trainer.global_step}")


if __name__ == "__main__":
    import pytorch_lightning
    import torch

    sys.path.insert(0, str(HERE))
    from record_tbptt_lightning_1_9 import _lightning_as_trainmesh

    _lightning_as_trainmesh()
    if sys.argv[1:2] == ["--leg"]:
        record_ddp_leg(sys.argv[2])
        sys.exit()
    for variant in sys.argv[1:] or VARIANTS:
        subprocess.run([sys.executable, __file__, "--leg", variant], check=True)
    recorded = json.loads(RECORDING.read_text())
    recorded["_source"] = (
        f"pytorch-lightning {pytorch_lightning.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
        "tests/trainer/optimizer_idx_run.py under strategy='ddp', devices=2 (gloo) with pytorch_lightning in "
        "trainmesh's place (tests/trainer/record_optimizer_idx_lightning_1_9.py); weights rounded to 7 places"
    )
    RECORDING.write_text(json.dumps(recorded, indent=0) + "\n")
