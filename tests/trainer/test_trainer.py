"""The Trainer's own entry points (trainer/trainer.py): what fit, validate, test and predict return.
The loop they run is tested in test_fit_loop.py; the settings in test_bad_input.py."""

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import TutorialModule, loaders, quiet_trainer, random_classification


def test_validate_test_predict_return_what_lightning_users_expect():
    train, val = loaders(shuffle=False)
    model = TutorialModule(num_features=16, learning_rate=1e-2)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, train, val)
    validated = trainer.validate(model, val, verbose=False)
    assert isinstance(validated, list) and set(validated[0]) == {"val_acc"}
    tested = trainer.test(model, val, verbose=False)
    assert set(tested[0]) == {"test_acc"}
    model.train()
    predictions = trainer.predict(model, DataLoader(random_classification(20).tensors[0], batch_size=8))
    assert [p.shape[0] for p in predictions] == [8, 8, 4]
    assert model.training, "predict leaves the module in the mode it found it in"
    model.eval()
    expected = model(random_classification(20).tensors[0])
    torch.testing.assert_close(torch.cat(predictions), expected)


@pytest.mark.parametrize("given", ["~/trainer", "~/trainer/./runs/", "runs/../other"])
def test_default_root_dir_is_expanded_and_normalized_as_lightning_s(given):
    # Lightning's own tests_pytorch/trainer/test_trainer.py::test_expand_home_trainer: "~" was kept,
    # and a run wrote its checkpoints and logs into a folder named "~" under the working directory
    pl = pytest.importorskip("lightning.pytorch")
    for value in (given, Path(given)):
        ours = tm.Trainer(default_root_dir=value, logger=False).default_root_dir
        assert ours == pl.Trainer(default_root_dir=value, logger=False).default_root_dir
    assert "~" not in ours
