"""Record pytorch-lightning 1.9.5 running the programs of ``lightning1_programs.py`` (the 1.x Trainer
names: ``resume_from_checkpoint``, ``trainer.tune`` with ``auto_lr_find`` / ``auto_scale_batch_size``,
``multiple_trainloader_mode``, ``move_metrics_to_cpu``, the Trainer's 1.x members and what its
graveyard raises, the DataModule's argparse face, the 1.x utilities) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_trainer.py

and rewrites ``tests/helpers/lightning_1_9_trainer.json``; ``tests/trainer/test_lightning1_members.py``
runs the same programs under trainmesh and compares.
"""

import json
import sys
import types
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "lightning_1_9_trainer.json"


def _lightning_as_trainmesh() -> None:
    """The programs import ``trainmesh``: a stand-in module holding 1.9.5's classes, so that the
    code that runs is the same text."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    class Trainer(pl.Trainer):
        def __init__(self, *, strategy="auto", **settings):
            super().__init__(strategy=None if strategy == "auto" else strategy, **settings)  # 1.9's default: None

        # read from 1.9.5's own signature, not the stand-in's
        default_attributes = staticmethod(pl.Trainer.default_attributes)
        match_env_arguments = staticmethod(pl.Trainer.match_env_arguments)

    stand_in = types.ModuleType("trainmesh")
    stand_in.Module, stand_in.DataModule, stand_in.Trainer = pl.LightningModule, pl.LightningDataModule, Trainer
    stand_in.seed_everything = pl.seed_everything
    callbacks = types.ModuleType("trainmesh.callbacks")
    callbacks.ModelCheckpoint, callbacks.Callback = ModelCheckpoint, pl.Callback
    stand_in.callbacks = callbacks
    sys.modules["trainmesh"], sys.modules["trainmesh.callbacks"] = stand_in, callbacks
    import pytorch_lightning.utilities.memory
    import pytorch_lightning.utilities.parsing
    import pytorch_lightning.utilities.seed
    import pytorch_lightning.utilities.types  # noqa: F401 - the submodules the programs import

    sys.modules["trainmesh.utilities"] = pl.utilities


def _graveyard() -> dict:
    """What each Trainer member 1.8 removed does in 1.9.5: the exception's type."""
    import pytorch_lightning as pl

    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    found = {}
    for name in lightning1_programs.GRAVEYARD_PROPERTIES:
        try:
            getattr(trainer, name)
            found[name] = "no error"
        except Exception as error:  # noqa: BLE001 - the type is what is recorded
            found[name] = type(error).__name__
    for name in lightning1_programs.GRAVEYARD_METHODS:
        try:
            getattr(trainer, name)()
            found[name] = "no error"
        except Exception as error:  # noqa: BLE001
            found[name] = type(error).__name__
    return found


def numpy_2_spelling() -> None:
    """1.9.5's ModelCheckpoint and EarlyStopping read ``np.Inf``, which NumPy 2 removed: a 1.9.5 venv
    with NumPy 2 runs them with ``np.inf`` under that name (``numpy<2`` needs nothing)."""
    import numpy

    if "Inf" not in dir(numpy):
        numpy.Inf = numpy.inf


if __name__ == "__main__":
    import pytorch_lightning
    import torch

    numpy_2_spelling()

    _lightning_as_trainmesh()
    sys.path.insert(0, str(HERE))
    import lightning1_programs

    warnings.simplefilter("ignore")
    recorded = {name: program() for name, program in lightning1_programs.PROGRAMS.items()}
    recorded["graveyard"] = _graveyard()
    recorded["_source"] = (
        f"pytorch-lightning {pytorch_lightning.__version__}, torch {torch.__version__.split('+')[0]} CPU: "
        "tests/helpers/lightning1_programs.py (tests/helpers/record_lightning_1_9_trainer.py)"
    )
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded {sorted(recorded)}")
