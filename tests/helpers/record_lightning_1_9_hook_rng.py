"""Record pytorch-lightning 1.9.5 running ``lightning1_hook_rng.measure`` (torch's generator at each hook of a 1.x
program's fit, test and predict) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_hook_rng.py

and rewrites ``tests/helpers/lightning_1_9_hook_rng.json``; ``tests/trainer/test_iterator_timing.py`` runs the same
program under trainmesh and compares.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record_lightning_1_9_ported_programs import record

    record("lightning1_hook_rng", "lightning_1_9_hook_rng.json")
