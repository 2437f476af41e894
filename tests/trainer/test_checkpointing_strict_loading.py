"""A resumed fit loads the weights with the module's ``strict_loading`` as Lightning reads it: None
(Lightning's unset value) is strict, so a checkpoint missing a layer's weights stops the fit (trainmesh
read None as False and loaded what it found; Lightning's trainer/connectors/test_checkpoint_connector.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


def strict_program(strict_loading):
    def program(L, root):
        class Model(L.pl.LightningModule):
            def __init__(self, extra=False):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)
                if extra:
                    self.extra = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.layer.parameters(), lr=0.1)

        data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        first = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
        first.fit(Model(), data)
        first.save_checkpoint(root / "a.ckpt")
        model = Model(extra=True)
        model.strict_loading = strict_loading
        second = L.pl.Trainer(**trainer_kwargs(root, max_steps=2, logger=False, enable_checkpointing=False))
        try:
            second.fit(model, data, ckpt_path=root / "a.ckpt")
        except (RuntimeError, ValueError) as error:  # torch's RuntimeError under Lightning; trainmesh's ValueError
            return {"missing": "extra.weight" in str(error)}
        return {"global_step": second.global_step}

    return program


@pytest.mark.parametrize("strict_loading", [None, False])
def test_strict_loading_none_is_strict_as_in_lightning(strict_loading, tmp_path):
    found = run_both(strict_program(strict_loading), tmp_path)
    assert found["lightning"] == ({"missing": True} if strict_loading is None else {"global_step": 2})
    assert differences(found["lightning"], found["trainmesh"]) == []
