"""Under a "-true" precision Lightning's precision plugin makes the parameters' dtype torch's default
for each step (its ``forward_context``) and for ``configure_model`` (its ``module_init_context``):
a ``torch.randn`` or ``torch.zeros`` in ``training_step`` is float64 under "64-true", bfloat16 under
"bf16-true"; the hooks around the step (``on_before_backward``, batch and epoch hooks) run in float32.
The same program under Lightning and trainmesh (Lightning's plugins/precision/test_double.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


def dtypes_program(precision: str):
    def program(L, root):
        seen: dict[str, object] = {}

        def note(hook):
            seen.setdefault(hook, str(torch.get_default_dtype()))

        class Model(L.pl.LightningModule):
            def configure_model(self):
                note("configure_model")
                self.layer = torch.nn.Linear(2, 1)
                seen["layer"] = str(self.layer.weight.dtype)

            def training_step(self, batch, batch_idx):
                note("training_step")
                noise = torch.randn(1)  # a tensor the step makes: the default dtype's random numbers
                seen.setdefault("noise", noise.float())
                return (self.layer(batch[0]) + noise).sum()

            def on_before_backward(self, loss):
                note("on_before_backward")

            def on_train_batch_end(self, outputs, batch, batch_idx):
                note("on_train_batch_end")

            def validation_step(self, batch, batch_idx):
                note("validation_step")

            def on_validation_epoch_end(self):
                note("on_validation_epoch_end")

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        kwargs = trainer_kwargs(root, max_steps=2, logger=False, enable_checkpointing=False, enable_model_summary=False)
        model = Model()
        L.pl.Trainer(precision=precision, num_sanity_val_steps=0, limit_val_batches=1, **kwargs).fit(model, data, data)
        seen["weight"] = model.layer.weight.detach().float()
        seen["after"] = str(torch.get_default_dtype())
        return seen

    return program


@pytest.mark.parametrize(("precision", "dtype"), [("64-true", "torch.float64"), ("bf16-true", "torch.bfloat16")])
def test_a_true_precision_makes_the_step_s_tensors_in_its_dtype_as_lightning(precision, dtype, tmp_path):
    found = run_both(dtypes_program(precision), tmp_path)
    assert found["lightning"]["training_step"] == found["lightning"]["configure_model"] == dtype
    assert found["lightning"]["on_before_backward"] == found["lightning"]["after"] == "torch.float32"
    assert differences(found["lightning"], found["trainmesh"]) == []
