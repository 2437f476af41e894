"""A NumPy float64 given to ``self.log`` by a module written for pytorch-lightning 1.x stays float64, as 1.9.5
logged it (``model_configuration.lightning1_number``, called by ``Module.log``). Compared with 1.9.5 itself: the program in
``helpers/lightning1_ported_programs.py`` was run under 1.9.5 by ``record_lightning_1_9_ported_programs.py``."""

import json
import warnings
from pathlib import Path

import numpy
import torch

import trainmesh as tm
from helpers import lightning1_ported_programs as programs

RECORDED = json.loads((Path(__file__).resolve().parent / "helpers" / "lightning_1_9_ported_programs.json").read_text())


def test_a_1x_module_s_numpy_float64_is_logged_as_1_9_5_logs_it():
    """callback_metrics, logged_metrics and ModelCheckpoint's best_model_score: float64 and every digit
    of the NumPy value, a Python float beside them float32, as 1.9.5. Before: float32 (a regressor's
    Spearman correlation logged as -0.0559440553188324 where 1.9.5 wrote -0.055944055944055944)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.numpy_float_logged(tm)
    assert got == RECORDED["measured"]["numpy_float_logged"]


def test_a_lightning_2_module_s_numpy_float64_stays_lightning_2_s_float32():
    from trainmesh.model_configuration import lightning1_number

    class Lightning2(tm.LightningModule):
        pass

    class Lightning1(Lightning2):
        def training_epoch_end(self, outputs):
            pass

    value = numpy.float64(0.1)
    assert lightning1_number(Lightning2(), value) is value
    assert lightning1_number(Lightning1(), value).dtype == torch.float64
    assert lightning1_number(Lightning1(), 0.1) == 0.1  # a Python float: 1.9.5's float32, as 2.x
