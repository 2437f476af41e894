"""Record pytorch-lightning 1.9.5 running tbptt_run.py's programs, as the data test_tbptt.py compares with.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
tests/helpers/record_lightning_1_9_names.py for how to build one):

    /tmp/pl19/bin/python tests/trainer/record_tbptt_lightning_1_9.py [VARIANT ...]
    /tmp/pl19/bin/python tests/trainer/record_tbptt_lightning_1_9.py --ddp [VARIANT ...]

``--ddp`` records 1.9.5 itself under strategy="ddp" on 2 CPU processes (gloo), each reading its half of
each batch of 4 through the DistributedSampler(shuffle=True, seed=0) 1.9.5 gives every training loader
under ddp: the reference of test_tbptt.py's ddp legs, kept under the entry "ddp". 1.9.5 launches the
other rank by running this script's command line again, so each variant gets a process of its own.

The program is tbptt_run.py's, with ``pytorch_lightning.LightningModule``, ``Callback`` and ``Trainer`` in
trainmesh's place (``tm``: a stand-in module, so the code that runs is the same text). Each variant's
global_step, calls, metrics, learning rate and weights (rounded to 7 places) are written into
``tbptt_lightning_1_9.json``, replacing that variant's entry; the others are kept.
"""

import json
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE / "tbptt_lightning_1_9.json"
VARIANTS = ("plain", "acc", "split", "turns", "turns_acc")
DDP_VARIANTS = ("plain", "acc", "turns")
# The variants whose whole call list is kept (the older ones keep the count; test_tbptt.py holds their start).
WITH_CALL_LISTS = ("turns", "turns_acc")


def _lightning_as_trainmesh() -> None:
    import pytorch_lightning as pl

    class Trainer(pl.Trainer):
        def __init__(self, *, strategy="auto", **settings):
            # 1.9 spells the default strategy None
            super().__init__(strategy=None if strategy == "auto" else strategy, **settings)

    stand_in = types.ModuleType("trainmesh")
    stand_in.Module, stand_in.Callback, stand_in.Trainer = pl.LightningModule, pl.Callback, Trainer
    sys.modules["trainmesh"] = stand_in


def record(variant: str, strategy: str = "auto", devices: int = 1) -> tuple[dict, bool]:
    from tbptt_run import fit

    module, trainer = fit(variant, strategy, devices)
    entry = {
        "global_step": trainer.global_step,
        "calls": len(module.calls),
        "metrics": {name: round(float(value), 7) for name, value in trainer.callback_metrics.items()},
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "weights": {
            name: [round(v, 7) for v in tensor.detach().flatten().tolist()]
            for name, tensor in module.state_dict().items()
        },
    }
    if variant in WITH_CALL_LISTS:
        entry["call_list"] = [list(call) for call in module.calls]
        entry["shapes"] = module.shapes
    return entry, trainer.is_global_zero


def record_ddp_leg(variant: str) -> None:
    """One variant under 1.9.5's ddp (this process and the rank 1.9.5 starts); rank 0 writes the entry."""
    entry, global_zero = record(variant, "ddp", 2)
    if global_zero:
        recorded = json.loads(RECORDING.read_text())
        legs = recorded.setdefault("ddp", {})
        legs[variant] = {key: entry[key] for key in ("global_step", "metrics", "weights")}
        legs["_source"] = "the same, under strategy='ddp', devices=2 (gloo), loaders of BATCH // 2"
        RECORDING.write_text(json.dumps(recorded, indent=0) + "\n")
        print(f"recorded ddp {variant}: global_step {entry['global_step']}")


if __name__ == "__main__":
    import pytorch_lightning
    import torch

    _lightning_as_trainmesh()
    sys.path.insert(0, str(HERE))
    if sys.argv[1:2] == ["--ddp-leg"]:
        record_ddp_leg(sys.argv[2])
        sys.exit()
    if sys.argv[1:2] == ["--ddp"]:
        for variant in sys.argv[2:] or DDP_VARIANTS:
            subprocess.run([sys.executable, __file__, "--ddp-leg", variant], check=True)
        sys.exit()
    recorded = json.loads(RECORDING.read_text())
    for variant in sys.argv[1:] or VARIANTS:
        recorded[variant], _ = record(variant)
        print(f"recorded {variant}: global_step {recorded[variant]['global_step']}")
    recorded["_source"] = (
        f"pytorch-lightning {pytorch_lightning.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
        "tests/trainer/tbptt_run.py with pytorch_lightning.LightningModule/Callback/Trainer "
        "(tests/trainer/record_tbptt_lightning_1_9.py); weights rounded to 7 places"
    )
    RECORDING.write_text(json.dumps(recorded, indent=0) + "\n")
