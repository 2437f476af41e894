"""ModelCheckpoint's warning where a fit saves into a folder that holds files already, as Lightning
2.6's ``__warn_if_dir_not_empty`` (setup of a fit, save_top_k != 0): a second fit into the same folder."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _model(framework, own_callbacks=()):
    """A one-layer module; ``own_callbacks``: what its ``configure_callbacks`` returns."""

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def configure_callbacks(self):
            return list(own_callbacks)

    return Model()


def _warned(framework, folder, save_top_k) -> list[str]:
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
            trainer.fit(_model(framework), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
        said += [str(w.message).replace(str(folder), "DIR") for w in caught if "Checkpoint directory" in str(w.message)]
    return said


@pytest.mark.parametrize("save_top_k", [1, 0])
def test_a_fit_into_a_folder_with_files_warns_as_lightning(tmp_path, save_top_k) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _warned(lightning, tmp_path / "lightning", save_top_k)
    assert expected == (["Checkpoint directory DIR exists and is not empty."] if save_top_k else [])
    assert _warned(trainmesh, tmp_path / "trainmesh", save_top_k) == expected


def _resumed_from_last(framework, folder) -> tuple[list[str], list[str | None]]:
    """Two fits with ``ckpt_path="last"``: the ModelCheckpoint(save_last=True) is the module's own
    (``configure_callbacks``), which Lightning's fit joins after it has chosen its "last" file."""

    said, resumed = [], []
    for _ in range(2):
        trainer = framework.Trainer(
            max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            own = [framework.callbacks.ModelCheckpoint(dirpath=folder, save_last=True)]
            trainer.fit(
                _model(framework, own), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2), ckpt_path="last"
            )
        words = [str(w.message).replace(str(folder), "DIR") for w in caught]
        said += [w for w in words if "Checkpoint directory" in w or "no last checkpoint" in w]
        resumed.append(trainer.ckpt_path)
    return said, resumed


def test_fit_from_last_with_nothing_to_resume_warns_in_lightning_s_order(tmp_path) -> None:
    """Lightning 2.6's fit chooses its "last" file before its run's set-up: its warning that there is
    none comes before ModelCheckpoint's setup warning, and a module's own ModelCheckpoint is not searched."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _resumed_from_last(lightning, tmp_path / "lightning")
    nothing = (
        '.fit(ckpt_path="last") is set, but there is no last checkpoint available. No checkpoint will be loaded.'
        " HINT: Set `ModelCheckpoint(..., save_last=True)`."
    )
    assert expected == ([nothing, nothing, "Checkpoint directory DIR exists and is not empty."], [None, None])
    assert _resumed_from_last(trainmesh, tmp_path / "trainmesh") == expected
