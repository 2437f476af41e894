"""Record pytorch-lightning 1.9.5 running ``lightning1_ported_programs.measure`` (users' 1.x programs, cut
down to what trainmesh ran differently) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_ported_programs.py

and rewrites ``tests/helpers/lightning_1_9_ported_programs.json``;
``tests/test_model_configuration_lightning1.py`` runs the same programs under trainmesh and compares.
"""

import importlib
import json
import logging
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def record(programs: str, out_name: str) -> None:
    """Run ``tests/helpers/<programs>.py``'s ``measure`` under the installed pytorch-lightning 1.9.5 and write
    what it measured, with the versions and the files it came from, to ``tests/helpers/<out_name>`` (every
    ``record_lightning_1_9_*programs``-style script is this call with its own two names)."""
    import pytorch_lightning as pl
    import torch

    sys.path.insert(0, str(HERE))
    measure = importlib.import_module(programs).measure
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measured = measure("pytorch_lightning")
    recorded = {
        "measured": measured,
        "_source": (
            f"pytorch-lightning {pl.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
            f"tests/helpers/{programs}.py (tests/helpers/{Path(sys.argv[0]).name})"
        ),
    }
    (HERE / out_name).write_text(json.dumps(recorded, indent=1) + "\n")
    print("recorded", out_name)


if __name__ == "__main__":
    record("lightning1_ported_programs", "lightning_1_9_ported_programs.json")
