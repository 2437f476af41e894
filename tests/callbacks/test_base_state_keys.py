"""Callbacks' states in a checkpoint, as Lightning keys them: ``state_key`` made with Lightning's
``_generate_state_key`` (its docs' way to keep several instances apart), and two stateful callbacks
under one key refused when the Trainer is made, in Lightning's words (Lightning's
trainer/connectors/test_callback_connector.py)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


def state_keys_program(L, root):
    class Counter(L.pl.Callback):
        def __init__(self, unique):
            self.unique = unique

        @property
        def state_key(self):
            return self._generate_state_key(unique=self.unique)

        def state_dict(self):
            return {"unique": self.unique}

    class SameKey(L.pl.Callback):
        def state_dict(self):
            return {"state": 1}

    class NoState(L.pl.Callback):
        pass

    class Broken(SameKey):  # its key reads an attribute it never set
        @property
        def state_key(self):
            return self._generate_state_key(monitor=self.monitor)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    found = {}
    kwargs = trainer_kwargs(root, max_steps=1, logger=False, enable_model_summary=False)
    trainer = L.pl.Trainer(callbacks=[Counter("one"), Counter("two"), NoState(), NoState()], **kwargs)
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(2, 2))))
    trainer.save_checkpoint(root / "a.ckpt")
    found["states"] = {
        k: v for k, v in torch.load(root / "a.ckpt", weights_only=False)["callbacks"].items() if "unique" in v
    }
    try:
        L.pl.Trainer(callbacks=[SameKey(), NoState(), SameKey()], **kwargs)
    except RuntimeError as error:
        found["error"] = str(error)
    try:  # a state_key that raises is not replaced by a default key
        L.pl.Trainer(callbacks=[Broken(), SameKey()], **kwargs)
    except AttributeError as error:
        found["broken"] = str(error)
    return found


def test_callback_state_keys_and_a_shared_key_are_lightning_s(tmp_path):
    found = run_both(state_keys_program, tmp_path)
    keys = sorted(key.rsplit(".", 1)[-1] for key in found["lightning"]["states"])  # the qualname of a local class
    assert keys == ["Counter{'unique': 'one'}", "Counter{'unique': 'two'}"]
    assert found["lightning"]["error"].startswith("Found more than one stateful callback of type `SameKey`.")
    assert differences(found["lightning"], found["trainmesh"]) == []
