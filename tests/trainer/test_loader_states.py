"""A train loader with ``state_dict``/``load_state_dict`` (Lightning's ``_Stateful``: a torchdata
``StatefulDataLoader``, a program's own iterable) across a checkpoint saved inside an epoch, under
Lightning 2.6.6 and trainmesh: the states saved in the ``loops`` entry (``fit_loop.state_dict.combined_loader``),
the batches the resumed fit reads and its weights."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from helpers.programs import differences, port, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


class _PositionedLoader:
    """Five batches, resumable from where its state says (its position counts the batches handed out)."""

    def __init__(self) -> None:
        self.start = self.position = 0

    def __len__(self) -> int:
        return 5

    def __iter__(self):
        start, self.start = self.start, 0
        for index in range(start, 5):
            self.position = index + 1
            yield torch.full((2, 3), float(index))

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.start = state["position"]


def _module(L, save: Path | None):
    class Module(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.read: list[tuple[int, int, float]] = []

        def training_step(self, batch, batch_idx):
            self.read.append((self.current_epoch, batch_idx, float(batch[0, 0])))
            return self.layer(batch).sum()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if save is not None and (self.current_epoch, batch_idx) == (0, 2):
                self.trainer.save_checkpoint(save)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return _PositionedLoader()

    return Module()


def _resumed(L, root: Path, written_by: str) -> dict:
    saved = root.parent / "lightning" / "mid.ckpt" if written_by == "lightning" else root / "mid.ckpt"
    settings = trainer_kwargs(root, max_epochs=2, logger=False, enable_checkpointing=False)
    if not saved.exists():
        with torch.random.fork_rng():
            L.pl.Trainer(**settings).fit(_module(L, saved))
    model = _module(L, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        L.pl.Trainer(**settings).fit(model, ckpt_path=saved)
    loops = torch.load(saved, weights_only=False)["loops"]["fit_loop"]["state_dict"]
    # and Lightning's resume of the file (trainmesh's own, for written_by="own")
    theirs = _module(port("lightning"), None)
    port("lightning").pl.Trainer(**settings).fit(theirs, ckpt_path=saved)
    return {
        "loader_states": loops.get("combined_loader"),
        "read": model.read,
        "weights": model.layer.weight.detach().clone(),
        "lightning_resume_read": theirs.read,
        # a resumable loader: no "dataloader is not resumable" warning (test_restart_counts_lightning: a plain one)
        "warned": [str(w.message) for w in caught if "not resumable" in str(w.message)],
    }


@pytest.mark.parametrize("written_by", ["own", "lightning"])
def test_a_stateful_loader_resumes_as_lightning_s(written_by, tmp_path):
    """A resume inside an epoch reads the rest of the epoch from the loader's saved state, as Lightning's
    (batches 3 and 4 of epoch 0). Before: trainmesh wrote no loader states (Lightning's resume of its file
    read batches 0 and 1 again) and did not load Lightning's (its resume of Lightning's file read 0 and 1)."""
    found = run_both(lambda L, root: _resumed(L, root, written_by), tmp_path)
    assert found["lightning"]["read"][:2] == [(0, 3, 3.0), (0, 4, 4.0)]
    assert differences(found["lightning"], found["trainmesh"]) == []
