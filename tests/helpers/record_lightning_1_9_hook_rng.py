"""Record pytorch-lightning 1.9.5 running ``lightning1_hook_rng.measure`` (torch's generator at each hook of a 1.x
program's fit, test and predict) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_hook_rng.py

and rewrites ``tests/helpers/lightning_1_9_hook_rng.json``; ``tests/trainer/test_iterator_timing.py`` runs the same
program under trainmesh and compares.
"""

import json
import logging
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_hook_rng.json"

if __name__ == "__main__":
    import pytorch_lightning as pl
    import torch

    sys.path.insert(0, str(HERE))
    from lightning1_hook_rng import measure

    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")
    recorded = {
        "measured": measure("pytorch_lightning"),
        "_source": (
            f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
            "tests/helpers/lightning1_hook_rng.py (tests/helpers/record_lightning_1_9_hook_rng.py)"
        ),
    }
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print("recorded", OUT.name)
