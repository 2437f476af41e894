"""A fit that starts with parts of the model in eval mode warns as Lightning 2.6 does: its words, once, as a
``PossibleUserWarning`` (which ``disable_possible_user_warnings()`` and a filter on that category hide).
Before, trainmesh said it in its own words as a plain ``UserWarning`` (Lightning's own
loops/test_training_loop.py::test_eval_mode_warning expected the category), then Lightning's words with the
parts' names added (l-progs14 p07's stdout differed by that sentence)."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}
POSSIBLE_USER_WARNING = {
    "lightning": importlib.import_module("lightning.pytorch.utilities.warnings").PossibleUserWarning,
    "trainmesh": importlib.import_module("trainmesh.utilities.warnings").PossibleUserWarning,
}
LIGHTNING_WORDS = (
    "Found 1 module(s) in eval mode at the start of training. This may lead to unexpected behavior during "
    "training. If this is intentional, you can ignore this warning."
)


def _fit(name, frozen):
    framework = FRAMEWORKS[name]

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.frozen = torch.nn.Linear(2, 2)
            if frozen:
                self.frozen.eval()

        def training_step(self, batch, batch_idx):
            return self.layer(self.frozen(batch[0])).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    return [
        (issubclass(w.category, POSSIBLE_USER_WARNING[name]), str(w.message))  # the whole message, as Lightning's
        for w in seen
        if "eval mode" in str(w.message)
    ]


@pytest.mark.parametrize("frozen", [True, False])
def test_eval_mode_warning_as_lightning(frozen):
    lightning = _fit("lightning", frozen)
    assert lightning == ([(True, LIGHTNING_WORDS)] if frozen else [])
    assert _fit("trainmesh", frozen) == lightning
