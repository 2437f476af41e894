"""An integer or bool tensor logged: Lightning 2.6.6 warns (its ``_ResultMetric.update``: "the value
needs to be floating to be reduced", a UserWarning once per name and hook) and stores it in float32;
a Python int (made float32 by ``self.log``) and a float16 tensor (converted) warn nothing. The same
module runs under Lightning and trainmesh and the warnings and stored dtypes are compared."""

import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port, trainer_kwargs


def _run(name, root):
    L = port(name)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("int_tensor", torch.tensor(3))
            self.log("python_int", 4)
            self.log("bool_tensor", torch.tensor(True))
            self.log("half", torch.tensor(1.5, dtype=torch.float16))
            self.log("int_epoch", torch.tensor(2), on_step=False, on_epoch=True)
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False, enable_model_summary=False)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    said = [(w.category.__name__, str(w.message)) for w in caught if "floating" in str(w.message)]
    return said, {k: v.dtype for k, v in trainer.callback_metrics.items()}


def test_integer_values_warn_and_are_stored_as_lightnings(tmp_path):
    theirs, ours = _run("lightning", tmp_path / "lightning"), _run("trainmesh", tmp_path / "trainmesh")
    assert [name for _, text in theirs[0] for name in ("int_tensor", "bool_tensor", "int_epoch") if name in text] == [
        "int_tensor",
        "bool_tensor",
        "int_epoch",
    ]
    assert ours == theirs
