"""The fit loop's warnings in Lightning 2.6's words, so that a program's ``warnings.filterwarnings``
on Lightning's text (``message=`` matches from the start) catches trainmesh's too (mnist-hello-world
and the other tutorials' short epochs printed trainmesh's own sentence)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _interval_warnings(pl, root, *, reload=False):
    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def loader(size):
        g = torch.Generator().manual_seed(0)
        return DataLoader(
            TensorDataset(torch.randn(size, 4, generator=g), torch.randn(size, 1, generator=g)), batch_size=4
        )

    sizes = iter([8, 12, 12])  # a curriculum: each reloaded loader its own count, warned of again

    class Reloading(Regressor):
        def train_dataloader(self):
            return loader(next(sizes))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = pl.Trainer(
            max_epochs=3 if reload else 1,
            reload_dataloaders_every_n_epochs=1 if reload else 0,
            default_root_dir=root,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        if reload:
            trainer.fit(Reloading())
        else:
            trainer.fit(Regressor(), loader(16))
    return [(w.category.__name__, str(w.message)) for w in caught if "logging interval" in str(w.message)]


def test_a_short_epoch_is_warned_of_in_lightning_s_words(tmp_path):
    import lightning.pytorch as lightning

    import trainmesh

    expected = _interval_warnings(lightning, tmp_path / "lightning")
    assert expected == [
        (
            "PossibleUserWarning",
            "The number of training batches (4) is smaller than the logging interval Trainer(log_every_n_steps=50)."
            " Set a lower value for log_every_n_steps if you want to see logs for the training epoch.",
        )
    ]
    assert _interval_warnings(trainmesh, tmp_path / "trainmesh") == expected


def test_a_reloaded_loader_is_warned_of_again_as_lightning(tmp_path):
    import lightning.pytorch as lightning

    import trainmesh

    expected = _interval_warnings(lightning, tmp_path / "lightning", reload=True)
    assert [message.split()[5] for _, message in expected] == ["(2)", "(3)", "(3)"]
    assert _interval_warnings(trainmesh, tmp_path / "trainmesh", reload=True) == expected
