"""``self.hparams`` (an AttributeDict) against Lightning 2.6's: a name never saved raises Lightning's
AttributeError words first (l-progs7 p08 read ``self.hparams.temperature`` that ``save_hyperparameters``
never saw; before, trainmesh's words were only "hyperparameter 'temperature' was not saved")."""

from __future__ import annotations

import pytest
import torch

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")


def _missing_hyperparameter_error(framework) -> str:
    class Model(framework.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(2, 1)

    with pytest.raises(AttributeError) as raised:
        Model().hparams.temperature  # noqa: B018  the read is the test
    return str(raised.value)


def test_a_hyperparameter_never_saved_raises_lightnings_words_first():
    theirs, ours = _missing_hyperparameter_error(pl), _missing_hyperparameter_error(tm)
    assert theirs == "'AttributeDict' object has no attribute 'temperature'"
    assert ours.startswith(theirs)
    assert "saved: ['lr']" in ours  # and which ones were saved
