"""Record pytorch-lightning 1.9.5 running ``lightning1_deprecations.measure`` (its 1.x module paths
``utilities.distributed`` / ``utilities.cloud_io`` and which 1.x Trainer arguments and members warn a
deprecation) and ``lightning1_leftovers.measure`` (the hooks 1.8 removed, a callback's returned state,
``weights_summary`` / ``distributed_backend``, ``utilities.seed``) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_deprecations.py

and rewrites ``tests/helpers/lightning_1_9_deprecations.json``;
``tests/utilities/test_lightning1_deprecations.py`` runs the same program under trainmesh and compares.
"""

import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_deprecations.json"

if __name__ == "__main__":
    import pytorch_lightning as pl
    import torch

    sys.path.insert(0, str(HERE))
    from lightning1_deprecations import measure
    from lightning1_leftovers import measure as measure_leftovers

    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    recorded = {
        "measured": measure("pytorch_lightning"),
        "leftovers": measure_leftovers("pytorch_lightning"),
        "_source": (
            f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
            "tests/helpers/lightning1_deprecations.py (tests/helpers/record_lightning_1_9_deprecations.py)"
        ),
    }
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print("recorded", OUT.name)
