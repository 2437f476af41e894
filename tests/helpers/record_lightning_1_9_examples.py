"""Record pytorch-lightning 1.9.5 running the programs of ``lightning1_examples.py`` (what Lightning 1.x's
published examples use: 1.x's ``finetune_function(..., opt_idx)``, ``LightningCLI``'s 1.x arguments) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in 1.9.5's venv (see
``record_lightning_1_9_names.py`` for how to make one); ``LightningCLI`` needs jsonargparse there too,
``pip install "jsonargparse[signatures]"`` (or its folder on ``PYTHONPATH``):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_examples.py

and rewrites ``tests/helpers/lightning_1_9_examples.json``; ``tests/trainer/test_lightning1_examples.py``
runs the same programs under trainmesh and compares.
"""

import json
import sys
import types
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_examples.json"
sys.path.insert(0, str(HERE))


def _more_of_lightning_as_trainmesh() -> None:
    """The stand-in ``trainmesh`` of ``record_lightning_1_9_trainer.py``, with the finetuning callbacks and
    ``trainmesh.cli`` (1.9.5's ``LightningCLI``)."""
    from pytorch_lightning import cli
    from pytorch_lightning.callbacks import BackboneFinetuning, BaseFinetuning
    from record_lightning_1_9_trainer import _lightning_as_trainmesh

    _lightning_as_trainmesh()
    callbacks = sys.modules["trainmesh.callbacks"]
    callbacks.BaseFinetuning, callbacks.BackboneFinetuning = BaseFinetuning, BackboneFinetuning
    stand_in_cli = types.ModuleType("trainmesh.cli")
    stand_in_cli.LightningCLI = cli.LightningCLI
    sys.modules["trainmesh"].cli = sys.modules["trainmesh.cli"] = stand_in_cli
    import pytorch_lightning.loops

    sys.modules["trainmesh"].loops = sys.modules["trainmesh.loops"] = pytorch_lightning.loops


if __name__ == "__main__":
    import pytorch_lightning
    import torch

    torch.set_num_threads(1)  # as the suite runs (tests/conftest.py): a second thread rounds sums differently
    _more_of_lightning_as_trainmesh()
    import lightning1_examples

    warnings.simplefilter("ignore")
    recorded = {name: program() for name, program in lightning1_examples.PROGRAMS.items()}
    recorded["_source"] = (
        f"pytorch-lightning {pytorch_lightning.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
        "tests/helpers/lightning1_examples.py (tests/helpers/record_lightning_1_9_examples.py)"
    )
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded {sorted(recorded)}")
