"""Record pytorch-lightning 1.9.5 running ``batch_count_program.reading_batch_counts`` (``trainer.num_*_batches``
at ten hooks and between fit, validate, test and predict) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_batch_counts.py

and rewrites ``tests/helpers/lightning_1_9_batch_counts.json``;
``tests/trainer/test_batch_counts_lightning1.py`` runs the same program under trainmesh and compares.
"""

import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_batch_counts.json"

if __name__ == "__main__":
    import pytorch_lightning as pl
    import torch

    sys.path.insert(0, str(HERE))
    from batch_count_program import reading_batch_counts

    warnings.simplefilter("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as root:
        readings = reading_batch_counts(SimpleNamespace(pl=pl), Path(root))
    recorded = {
        "readings": readings,
        "_source": (
            f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
            "tests/helpers/batch_count_program.py (tests/helpers/record_lightning_1_9_batch_counts.py)"
        ),
    }
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded {len(readings)} readings")
