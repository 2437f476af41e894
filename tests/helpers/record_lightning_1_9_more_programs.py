"""Record pytorch-lightning 1.9.5 running ``lightning1_more_programs.measure`` (users' 1.x programs of l1-progs16,
cut down to what trainmesh ran differently) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_more_programs.py

and rewrites ``tests/helpers/lightning_1_9_more_programs.json``; the tests named in
``lightning1_more_programs.py`` run the same programs under trainmesh and compare.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record_lightning_1_9_ported_programs import record

    record("lightning1_more_programs", "lightning_1_9_more_programs.json")
