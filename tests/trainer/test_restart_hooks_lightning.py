"""The hooks a resumed ``fit(ckpt_path=...)`` calls, with ``current_epoch`` / ``global_step`` at
each, under Lightning 2.6.6 and trainmesh, for checkpoints taken at an epoch's end (in its
``on_train_epoch_end``, and in the validation after its last batch), mid-epoch
(``every_n_train_steps``) and at ``max_steps``; and ModelCheckpoint's state restored under another
``monitor``; and one taken in the last batch's ``on_train_batch_end``.

Lightning's ``fit_loop.restarting`` (a checkpoint taken inside an epoch, its end included, or a fit
bounded by ``max_steps``) skips the sanity check; a checkpoint taken in the validation after an
epoch's last batch has that epoch's end still to run: ``on_train_start``, its
``on_train_epoch_end`` hooks, ``on_train_end``, even where ``max_epochs`` is then reached.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

_CALLBACK_HOOKS = (
    "on_fit_start",
    "on_sanity_check_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_end",
    "on_validation_end",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
)
_MODULE_HOOKS = ("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_train_end")

# (first fit's checkpointing and limits, the file resumed from, the resumed fit's limits)
_CASES = {
    "epoch_end_same_max_epochs": (dict(monitor="val"), dict(max_epochs=2), "last.ckpt", dict(max_epochs=2)),
    "epoch_end_more_epochs": (dict(monitor="val"), dict(max_epochs=2), "last.ckpt", dict(max_epochs=3)),
    "end_validation_same_max_epochs": (
        dict(monitor="val"),
        dict(max_epochs=2, val_check_interval=0.5),
        "last.ckpt",
        dict(max_epochs=2, val_check_interval=0.5),
    ),
    "end_validation_more_epochs": (
        dict(monitor="val"),
        dict(max_epochs=2, val_check_interval=0.5),
        "last.ckpt",
        dict(max_epochs=3, val_check_interval=0.5),
    ),
    # bounded by max_steps, Lightning's restart runs the checkpoint's epoch end again
    "epoch_end_under_max_steps": (dict(monitor="val"), dict(max_epochs=2), "last.ckpt", dict(max_steps=12)),
    "mid_epoch": (dict(every_n_train_steps=3), dict(max_epochs=2), "epoch=0-step=3.ckpt", dict(max_epochs=2)),
    # saved in the epoch's last on_train_batch_end (4 batches an epoch): Lightning goes on with the next
    # epoch, without the saved epoch's end (its validation included) nor the next one's start hooks
    "last_batch": (dict(every_n_train_steps=4), dict(max_epochs=2), "epoch=1-step=8.ckpt", dict(max_epochs=3)),
    "max_steps": (dict(every_n_train_steps=3), dict(max_steps=6), "epoch=1-step=6.ckpt", dict(max_steps=6)),
    # ... with max_steps reached there: Lightning's fit loop is done before its restart, current_epoch stays 1
    "last_batch_at_max_steps": (
        dict(every_n_train_steps=4),
        dict(max_epochs=2),
        "epoch=1-step=8.ckpt",
        dict(max_epochs=3, max_steps=8),
    ),
}


def resumed(L, root: Path, case: str):
    saving, first, path, second = _CASES[case]
    calls = []

    def record(who, name, trainer):
        calls.append((who, name, trainer.current_epoch, trainer.global_step, trainer.fit_loop.restarting))

    def recorder(who, name):
        def hook(self, trainer, *args):
            record(who, name, trainer)

        return hook

    Recorder = type("Recorder", (L.pl.Callback,), {name: recorder("callback", name) for name in _CALLBACK_HOOKS})

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.net(batch[0]).pow(2).mean()
            self.log("loss", loss, on_epoch=True)
            self.log("rising", float(self.current_epoch), on_step=False, on_epoch=True)  # rises: the plateau steps
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val", self.net(batch[0]).pow(2).mean())

        def train_dataloader(self):
            record("module", "train_dataloader", self.trainer)
            return DataLoader(TensorDataset(torch.arange(16.0).view(8, 2) / 10), batch_size=2)

        def val_dataloader(self):
            record("module", "val_dataloader", self.trainer)
            return DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "rising"}}

    for name in _MODULE_HOOKS:
        setattr(Model, name, lambda self, name=name: record("module", name, self.trainer))

    saves = L.callbacks.ModelCheckpoint(
        dirpath=root, filename="{epoch}-{step}", save_top_k=-1, save_last=True, **saving
    )
    torch.manual_seed(0)
    L.pl.Trainer(**trainer_kwargs(root, callbacks=[saves], logger=False, **first)).fit(Model())
    calls.clear()
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[Recorder()], logger=False, **second))
    trainer.fit(model, ckpt_path=str(root / path))
    return {
        "calls": calls,
        "counters": (trainer.current_epoch, trainer.global_step),
        "weights": model.net.weight.tolist(),
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }


@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_resumed_fit_calls_lightning_s_hooks(case, tmp_path):
    """Before: trainmesh ran the sanity check in the mid-epoch and max_steps resumes, and resumed from
    a checkpoint taken in the validation after an epoch's last batch with the next epoch: neither
    on_train_start, that epoch's on_train_epoch_end nor on_train_end where max_epochs was reached.
    ``last_batch``, before: trainmesh ran the saved epoch's on_train_epoch_end (an EarlyStopping or
    ReduceLROnPlateau there acting once more) and the next epoch's on_train_epoch_start. ``mid_epoch``
    and ``last_batch``, before: the ReduceLROnPlateau stepped at the end of the resumed fit's
    first epoch, where Lightning's restarting fit loop steps none."""
    found = run_both(lambda L, root: resumed(L, root, case), tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert ours["calls"] == theirs["calls"]
    assert ours["counters"] == theirs["counters"]
    assert ours["lr"] == theirs["lr"]  # the plateau steps none at the end of a restart's first epoch
    if case == "end_validation_same_max_epochs":
        # Lightning's checkpoint holds no epoch accumulators: its rerun epoch end has no epoch values, and
        # a named ckpt_path of trainmesh's own starts them empty too (docs/how-to/lightning.md)
        assert ours["callback_metrics"] == theirs["callback_metrics"] == {}
    elif case == "mid_epoch":  # Lightning reads the epoch's first batches again there (docs/how-to/lightning.md)
        assert set(ours["callback_metrics"]) == set(theirs["callback_metrics"])
    else:
        assert ours["callback_metrics"] == theirs["callback_metrics"]
    if case != "mid_epoch":
        assert ours["weights"] == theirs["weights"]


def restored_under_another_monitor(L, root: Path):
    ranked = L.callbacks.ModelCheckpoint(dirpath=root, monitor="a", save_top_k=2)
    state = ranked.state_dict() | {
        "best_model_score": torch.tensor(0.5),
        "best_model_path": str(root / "p.ckpt"),
        "best_k_models": {str(root / "p.ckpt"): torch.tensor(0.5), str(root / "q.ckpt"): torch.tensor(0.7)},
        "kth_best_model_path": str(root / "q.ckpt"),
        "kth_value": torch.tensor(0.7),
        "last_model_path": str(root / "last.ckpt"),
    }
    other = L.callbacks.ModelCheckpoint(dirpath=root, monitor="b", save_top_k=2)
    other.load_state_dict(state)
    return {
        "best_model_score": float(other.best_model_score),
        "best_model_path": Path(other.best_model_path).name,
        "best_k_models": {Path(k).name: float(v) for k, v in other.best_k_models.items()},
        "kth": (Path(other.kth_best_model_path).name, float(other.kth_value)),
        "last_model_path": Path(other.last_model_path).name,
    }


def test_a_state_ranked_by_another_monitor_is_restored_as_lightning_restores_it(tmp_path, recwarn):
    """Before: trainmesh warned and started the top-k ranking afresh (best_k_models empty)."""
    found = run_both(restored_under_another_monitor, tmp_path)
    assert found["trainmesh"] == found["lightning"]
    assert found["lightning"]["best_k_models"] == {"p.ckpt": 0.5, "q.ckpt": pytest.approx(0.7)}
