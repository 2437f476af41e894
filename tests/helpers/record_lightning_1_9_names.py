"""Record pytorch-lightning 1.9.5's public names as data, for the inventory of Lightning's API.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own:

    python -m venv /tmp/pl19 && /tmp/pl19/bin/pip install torch==2.13.0 "numpy<2" \\
        && /tmp/pl19/bin/pip install pytorch-lightning==1.9.5 && /tmp/pl19/bin/pip install --no-deps "setuptools<70"

    /tmp/pl19/bin/python tests/helpers/record_lightning_1_9_names.py

and rewrites `tests/helpers/lightning_1_9_names.json`, which `lightning_inventory.py` reads. (Three pip steps:
one command holding the setuptools pin no longer resolves against torch 2.13.0's CPU wheel.)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pytorch_lightning  # noqa: E402
from lightning_inventory import RECORDED_1_9, lightning_names  # noqa: E402

if __name__ == "__main__":
    names = sorted(set(lightning_names("pytorch_lightning")))
    lines = ",\n".join(json.dumps(list(pair)) for pair in names)
    RECORDED_1_9.write_text(f'{{"version": "{pytorch_lightning.__version__}", "names": [\n{lines}\n]}}\n')
    print(f"recorded {len(names)} names of pytorch-lightning {pytorch_lightning.__version__}")
