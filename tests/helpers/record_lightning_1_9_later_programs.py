"""Record pytorch-lightning 1.9.5 running ``lightning1_later_programs.measure`` (users' 1.x programs of l-progs15, cut
down to what trainmesh ran differently) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_later_programs.py

and rewrites ``tests/helpers/lightning_1_9_later_programs.json``;
``tests/tuner/test_tuning_lightning1_metrics.py`` runs the same programs under trainmesh and compares.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record_lightning_1_9_ported_programs import record

    record("lightning1_later_programs", "lightning_1_9_later_programs.json")
