"""Record pytorch-lightning 1.9.5 running ``lightning1_later_programs.measure`` (users' 1.x programs of l-progs15, cut
down to what trainmesh ran differently) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_later_programs.py

and rewrites ``tests/helpers/lightning_1_9_later_programs.json``;
``tests/tuner/test_tuning_lightning1_metrics.py`` runs the same programs under trainmesh and compares.
"""

import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_later_programs.json"

if __name__ == "__main__":
    import pytorch_lightning as pl
    import torch

    sys.path.insert(0, str(HERE))
    from lightning1_later_programs import measure

    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    recorded = {
        "measured": measure("pytorch_lightning"),
        "_source": (
            f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
            "tests/helpers/lightning1_later_programs.py (tests/helpers/record_lightning_1_9_later_programs.py)"
        ),
    }
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print("recorded", OUT.name)
