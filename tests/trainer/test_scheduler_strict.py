"""An lr_scheduler dict's ``"strict"`` as Lightning 2.6 reads it: a plateau scheduler whose monitored
metric was not logged stops the run (True, the default) or skips that step with Lightning's
RuntimeWarning (False). Before: the key was accepted and ignored (always an error)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def plateau_on_a_missing_metric(L, root, strict):
    class Net(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss", "strict": strict},
            }

    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=False, enable_checkpointing=False))
    model = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(model, DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
            raised = None
        except Exception as error:  # noqa: BLE001 - the type is what is compared
            raised = type(error).__name__
    skipped = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "strict" in str(w.message)]
    return {
        "raised": raised,
        "skip_warnings": skipped,
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
    }


@pytest.mark.parametrize("strict", [True, False])
def test_strict_reads_as_lightning_s(tmp_path, strict):
    found = run_both(lambda L, root: plateau_on_a_missing_metric(L, root, strict), tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs["raised"] == ("MisconfigurationException" if strict else None)
    assert ours["raised"] == theirs["raised"]
    assert ours["skip_warnings"] == theirs["skip_warnings"] and len(theirs["skip_warnings"]) == (0 if strict else 2)
    assert ours["lr"] == theirs["lr"] == 0.1
    assert all(torch.equal(ours["weights"][k], v) for k, v in theirs["weights"].items())
