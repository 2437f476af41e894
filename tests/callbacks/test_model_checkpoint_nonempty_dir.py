"""ModelCheckpoint's warning where a fit saves into a folder that holds files already, as Lightning
2.6's ``__warn_if_dir_not_empty`` (setup of a fit, save_top_k != 0): a second fit into the same folder."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _warned(framework, folder, save_top_k) -> list[str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    said = []
    for _ in range(2):
        trainer = framework.Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[framework.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=save_top_k)],
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
        said += [str(w.message).replace(str(folder), "DIR") for w in caught if "Checkpoint directory" in str(w.message)]
    return said


@pytest.mark.parametrize("save_top_k", [1, 0])
def test_a_fit_into_a_folder_with_files_warns_as_lightning(tmp_path, save_top_k) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _warned(lightning, tmp_path / "lightning", save_top_k)
    assert expected == (["Checkpoint directory DIR exists and is not empty."] if save_top_k else [])
    assert _warned(trainmesh, tmp_path / "trainmesh", save_top_k) == expected
