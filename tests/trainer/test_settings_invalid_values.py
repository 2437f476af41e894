"""A batch limit, ``val_check_interval`` or ``overfit_batches`` out of range stops the Trainer's
construction with Lightning 2.6's exception and its words ("You have passed invalid value 1.2 for
limit_train_batches, it has to be in [0.0, 1.0] or an int."), as its own tests match them
(test_dataloaders.py::test_dataloader_config_errors_init); trainmesh said it in words of its own."""

from __future__ import annotations

import pytest

pl = pytest.importorskip("lightning.pytorch")

from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration  # noqa: E402

import trainmesh as tm  # noqa: E402
from trainmesh.utilities.exceptions import MisconfigurationException  # noqa: E402

NAMES = ["limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"]
VALUES = [-0.1, 1.2, -3]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("name", [*NAMES, "val_check_interval", "overfit_batches"])
def test_an_out_of_range_value_is_refused_in_lightning_s_words(name, value):
    with pytest.raises(PlMisconfiguration) as theirs:
        pl.Trainer(**{name: value})
    with pytest.raises(MisconfigurationException) as ours:
        tm.Trainer(**{name: value})
    assert str(ours.value).startswith(str(theirs.value))
