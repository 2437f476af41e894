"""Record pytorch-lightning 1.9.5 running ``search_logger.measure`` (what a module sees of the run's logger while
``trainer.tune`` / the tuner searches) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_search_logger.py

and rewrites ``tests/helpers/lightning_1_9_search_logger.json``; ``tests/tuner/test_search_logger.py`` runs
the same programs under trainmesh and compares.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record_lightning_1_9_ported_programs import record

    record("search_logger", "lightning_1_9_search_logger.json")
