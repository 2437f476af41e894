"""The batch size ``self.log`` weighs an epoch mean by, read from the batch as Lightning 2.6 reads it
(its ``extract_batch_size``: the first tensor found; a string, a number or a tensor of another size
after it is ambiguous and warns; no tensor at all raises ``MisconfigurationException`` where a mean
needs the size): the same program under Lightning and trainmesh gives the same epoch value, the
same warning and the same exception."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch.utils.data import DataLoader


@dataclasses.dataclass
class _Pair:
    name: str
    x: torch.Tensor


def _batch(kind: str, ids: list[int]) -> object:
    x = torch.tensor(ids, dtype=torch.float32)
    return {
        "dict": lambda: {"x": x, "first": x[:1]},  # ambiguous: the first size counts (7 then 1)
        "int_first": lambda: [len(ids), x],  # a number before the tensor: the tensor's size
        "tensor_then_str": lambda: (x, "names"),  # ambiguous: a string after the size
        "dataclass": lambda: _Pair("n", x),
        "no_tensor": lambda: {"ids": list(ids)},  # nothing to weigh by: refused where a mean needs it
    }[kind]()


def _epoch_value(framework, kind: str, reduce_fx: str) -> tuple[str, list[str]]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def validation_step(self, batch, batch_idx):
            self.log("v", torch.tensor(float(batch_idx + 1)), reduce_fx=reduce_fx)

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            return batch  # (a dataclass of a string stays as it is)

    # 7, 7, 3 samples: the weighted mean 1.7647 (17 samples), the plain mean of the values 2.0
    loader = DataLoader(list(range(17)), batch_size=7, collate_fn=lambda ids: _batch(kind, ids))
    trainer = framework.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome = f"{trainer.validate(Model(), loader, verbose=False)[0]['v']:.6f}"
        except Exception as error:  # the class's name: Lightning's and trainmesh's share it
            outcome = f"{type(error).__name__}: {error}"
    return outcome, sorted({str(w.message) for w in caught if "batch_size" in str(w.message)})


@pytest.mark.parametrize(
    ("kind", "reduce_fx"),
    [("dict", "mean"), ("int_first", "mean"), ("tensor_then_str", "mean"), ("dataclass", "mean")]
    + [("no_tensor", "mean"), ("no_tensor", "sum"), ("no_tensor", "max")],
)
def test_epoch_values_weigh_by_lightning_s_batch_size(kind: str, reduce_fx: str) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.utilities import data as lightning_data

    import trainmesh
    from trainmesh.utilities import data as our_data

    # Both warn once per message and process: start both caches empty, so each case shows its warning.
    lightning_data.warning_cache.clear()
    our_data._WARNINGS.clear()
    expected = _epoch_value(lightning, kind, reduce_fx)
    assert _epoch_value(trainmesh, kind, reduce_fx) == expected
    if kind in ("dict", "tensor_then_str"):
        assert expected[1], "Lightning warns of the ambiguous batch"
    if (kind, reduce_fx) == ("no_tensor", "mean"):
        assert expected[0].startswith("MisconfigurationException")
