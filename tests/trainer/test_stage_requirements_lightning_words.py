"""The configuration errors a program can catch carry Lightning 2.6's words beside trainmesh's (the
regexes of Lightning's own tests/tests_pytorch/trainer/test_config_validator.py): a module without
``training_step``/``configure_optimizers``/``validation_step``, ``predict_step = None`` or neither it nor ``forward``, and
``gradient_clip_val`` or ``accumulate_grad_batches`` under manual optimization. Before: the same exception type with trainmesh's words only, so Lightning's
``pytest.raises(..., match=...)`` (or a program's ``"No `training_step()`" in str(err)``) failed."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port, trainer_kwargs

pytest.importorskip("lightning.pytorch")

CASES = {
    "training_step": ("fit", r"No `training_step\(\)` method defined."),
    "configure_optimizers": ("fit", r"No `configure_optimizers\(\)` method defined."),
    "validation_step": ("validate", r"No `validation_step\(\)` method defined"),
    "clipping": ("fit", r"Automatic gradient clipping is not supported"),
    "accumulating": ("fit", r"Automatic gradient accumulation is not supported"),
    "predict_step": ("predict", r"`predict_step` cannot be None."),
    "forward": ("predict", r"requires `forward` method to run."),  # neither predict_step nor forward defined
}


def _module(pl, left_out):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.automatic_optimization = left_out not in ("clipping", "accumulating")
            if left_out == "predict_step":
                self.predict_step = None

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if left_out in ("training_step", "configure_optimizers", "validation_step"):
        setattr(Model, left_out, getattr(pl.LightningModule, left_out))
    return Model()


@pytest.mark.parametrize("framework", ["lightning", "trainmesh"])
@pytest.mark.parametrize("case", list(CASES))
def test_configuration_errors_carry_lightnings_words(tmp_path, framework, case):
    L = port(framework)
    stage, words = CASES[case]
    clip = {"clipping": {"gradient_clip_val": 1.0}, "accumulating": {"accumulate_grad_batches": 2}}.get(case, {})
    trainer = L.pl.Trainer(**trainer_kwargs(tmp_path, max_steps=1, logger=False, **clip))
    loader = DataLoader(TensorDataset(torch.ones(4, 4)))
    with pytest.raises(L.pl.utilities.exceptions.MisconfigurationException, match=words):
        getattr(trainer, stage)(_module(L.pl, case), loader)
