"""What ``training_step`` may return, refused in Lightning's words (its ``ClosureResult`` and
``ManualResult``, MisconfigurationException) before trainmesh's hint: the same program under Lightning
and trainmesh (Lightning's loops/optimization/test_automatic_loop.py and test_manual_loop.py)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

AUTOMATIC_NO_TENSOR = "In automatic optimization, `training_step` must return a Tensor, a dict, or None"
AUTOMATIC_NO_LOSS = "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present"
MANUAL_NO_TENSOR = "In manual optimization, `training_step` must either return a Tensor or have no return."


class Outputs(Mapping):
    """A Mapping that is no dict (Lightning's ClosureResult takes any)."""

    def __init__(self, d):
        self.d = d

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)

    def __getitem__(self, key):
        return self.d[key]


def step_returning(returned, *, manual: bool):
    def program(L, root):
        seen = []

        class Returns(L.pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.automatic_optimization = not manual
                self.layer = nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                loss = self.layer(batch[0]).sum()
                return returned(loss)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        class SeesTheError(L.pl.Callback):
            def on_exception(self, trainer, pl_module, exception):
                seen.append(type(exception).__name__)

        kwargs = trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False, callbacks=[SeesTheError()])
        exceptions = importlib.import_module(f"{L.pl.__name__}.utilities.exceptions")
        model = Returns()
        try:
            L.pl.Trainer(**kwargs).fit(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
        except exceptions.MisconfigurationException as error:
            words = next(
                w for w in (AUTOMATIC_NO_TENSOR, AUTOMATIC_NO_LOSS, MANUAL_NO_TENSOR) if str(error).startswith(w)
            )
            return {"words": words, "on_exception": len(seen)}
        return {"trained": model.layer.weight.detach().clone()}

    return program


@pytest.mark.parametrize(
    ("manual", "returned", "words"),
    [
        (False, lambda loss: 5.0, AUTOMATIC_NO_TENSOR),
        (False, lambda loss: {"a": loss}, AUTOMATIC_NO_LOSS),
        (False, lambda loss: Outputs({"a": loss}), AUTOMATIC_NO_LOSS),
        (False, lambda loss: Outputs({"loss": loss}), None),  # trained, as a dict is
        (True, lambda loss: 5, MANUAL_NO_TENSOR),
        (True, lambda loss: "loss", MANUAL_NO_TENSOR),
        (True, lambda loss: [1.0], MANUAL_NO_TENSOR),
    ],
    ids=[
        "auto-float",
        "auto-dict-no-loss",
        "auto-mapping-no-loss",
        "auto-mapping-loss",
        "manual-int",
        "manual-str",
        "manual-list",
    ],
)
def test_what_training_step_returns_is_refused_in_lightning_s_words(manual, returned, words, tmp_path):
    found = run_both(step_returning(returned, manual=manual), tmp_path)
    if words is None:
        assert "trained" in found["lightning"]
    else:
        assert found["lightning"] == {"words": words, "on_exception": 1}
    assert differences(found["lightning"], found["trainmesh"]) == []
