"""``configure_model`` is Lightning 2.1's hook: a module written for Lightning 1.x (one defining a hook
2.0 removed) may have a method of its own by that name, which pytorch-lightning 1.9.5 never calls
(model_configuration.configure_model_is_a_hook). Compared with 1.9.5 itself: the program in
``helpers/lightning1_ported_programs.py`` was run under 1.9.5 by ``record_lightning_1_9_ported_programs.py``."""

import json
import warnings
from pathlib import Path

import torch
from torch import nn

import trainmesh as tm
from helpers import lightning1_ported_programs as programs

RECORDED = json.loads((Path(__file__).resolve().parent / "helpers" / "lightning_1_9_ported_programs.json").read_text())


def test_a_1x_module_s_own_configure_model_is_not_called_as_1_9_5():
    """Built once in ``__init__`` (1.9.5: 1 call at fit, 1 at load_from_checkpoint); the trained and the
    loaded weights and the generator's next draw bit-identical to 1.9.5's. Before: called again at fit
    (new random weights: a detector's run ended 0.72 away from 1.9.5's) and at load_from_checkpoint."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.own_configure_model(tm)
    assert got == RECORDED["measured"]["own_configure_model"]


def test_configure_model_is_a_hook_where_the_module_is_not_1x():
    from trainmesh.model_configuration import configure_model_is_a_hook

    class Lightning2(tm.LightningModule):
        def configure_model(self):
            self.layer = nn.Linear(1, 1)

    class Lightning1(Lightning2):
        def validation_epoch_end(self, outputs):
            pass

    assert configure_model_is_a_hook(Lightning2())
    assert not configure_model_is_a_hook(Lightning1())
    assert not configure_model_is_a_hook(tm.LightningModule())
    assert not configure_model_is_a_hook(torch.nn.Linear(1, 1))
