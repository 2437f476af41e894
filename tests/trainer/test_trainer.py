"""The Trainer's own entry points (trainer/trainer.py): what fit, validate, test and predict return.
The loop they run is tested in test_fit_loop.py; the settings in test_bad_input.py."""

import torch
from torch.utils.data import DataLoader

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
