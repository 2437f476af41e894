"""``self.all_gather`` on one process, as Lightning 2.6 answers it: without a process group (the
single-device strategy) the data comes back as it is, not stacked; the same program is run under
Lightning and trainmesh and what ``all_gather`` returned is compared."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _gathered_shapes(framework) -> dict[str, object]:
    seen: dict[str, object] = {}

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            out = self.layer(x)
            if batch_idx == 0:
                seen["tensor"] = tuple(self.all_gather(out).shape)
                seen["scalar"] = tuple(self.all_gather(torch.tensor(1.0)).shape)
                nested = self.all_gather({"a": torch.ones(2), "n": 3}, sync_grads=True)
                seen["nested"] = (tuple(nested["a"].shape), nested["n"])
                numbers = self.all_gather({"i": 3, "f": 0.5, "b": True, "np": np.arange(2)})
                seen["numbers"] = {k: (type(v).__name__, str(getattr(v, "dtype", None))) for k, v in numbers.items()}
            return torch.nn.functional.mse_loss(out, y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    trainer = framework.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=8))
    return seen


def test_all_gather_on_one_process_returns_what_lightning_returns() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _gathered_shapes(lightning)
    numbers = expected.pop("numbers")
    assert numbers == {  # Lightning's: numbers and numpy arrays become tensors before the gather
        "i": ("Tensor", "torch.int32"),
        "f": ("Tensor", "torch.float32"),
        "b": ("Tensor", "torch.uint8"),
        "np": ("Tensor", "torch.int64"),
    }
    assert expected == {"tensor": (8, 1), "scalar": (), "nested": ((2,), 3)}  # Lightning's, as it is
    assert _gathered_shapes(trainmesh) == {**expected, "numbers": numbers}
